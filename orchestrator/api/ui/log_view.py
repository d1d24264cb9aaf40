"""A session log as the job page shows it: ranks named, repeated lines collapsed, a search, and
the failure's traceback marked. Pure: text in, lines out."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# torchrun's per-rank line prefix (worker/launch.py asks for it): "[rank1]: text".
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
TRACEBACK_START = "Traceback (most recent call last):"
# The page shows the end of a session's log; the whole log is a download away.
SHOWN_CHARS = 200_000


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based, in the shown window
    rank: int | None
    text: str  # without the rank prefix
    repeats: int  # later copies of this line, hidden below it
    traceback: bool  # the start of the last traceback: the failure's


@dataclass(frozen=True)
class LogView:
    lines: list[LogLine]
    total: int  # lines in the shown window, copies included
    hidden_copies: int
    truncated: bool  # the window starts after the log's beginning
    query: str
    has_traceback: bool


def split_rank(line: str) -> tuple[int | None, str]:
    found = _RANK_PREFIX.match(line)
    if found is None:
        return None, line
    return int(found.group(1)), line[found.end() :]


def view_log(text: str, *, truncated: bool = False, query: str = "") -> LogView:
    """The lines to show: each distinct non-blank line once, where it first appears, with the
    count of its later copies (a DeepSpeed warning repeated 1,800 times is one line); with a
    `query`, only the lines containing it (case-insensitive). The last traceback and what follows
    it are shown whole: they are why the session failed."""
    raw = text.splitlines()
    if truncated and raw:
        raw = raw[1:]  # the window may start inside a line
    parsed = [split_rank(line) for line in raw]
    last_traceback = max(
        (i for i, (_, line) in enumerate(parsed) if line.startswith(TRACEBACK_START)), default=-1
    )
    whole_from = last_traceback if last_traceback >= 0 else len(parsed)
    counts = Counter(line for _, line in parsed[:whole_from] if line.strip())
    needle = query.casefold()
    shown: list[LogLine] = []
    seen: set[str] = set()
    for index, (rank, line) in enumerate(parsed):
        collapsible = index < whole_from and bool(line.strip())
        if collapsible and line in seen:
            continue
        seen.add(line)
        if needle and needle not in line.casefold():
            continue
        repeats = counts[line] - 1 if collapsible else 0
        shown.append(LogLine(index + 1, rank, line, repeats, index == last_traceback))
    hidden = sum(count - 1 for count in counts.values())
    return LogView(shown, len(raw), hidden, truncated, query, last_traceback >= 0)
