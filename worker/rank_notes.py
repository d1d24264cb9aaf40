"""Why a rank ended, left on disk where rank 0 and the launcher read it.

When one rank of several fails (hung, or an error of its own), the others only see a broken
collective ("Connection closed by peer"). The failing rank writes one line first, so the
segment's error names the rank and its reason instead of the symptom on rank 0.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

_NOTE = re.compile(r"^rank(\d+)-failure\.txt$")


def note_path(output_dir: Path, rank: int) -> Path:
    return output_dir / f"rank{rank}-failure.txt"


def write_rank_note(output_dir: Path, rank: int, reason: str) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    note_path(output_dir, rank).write_text(reason)


def peer_failure(output_dir: Path, rank: int) -> str | None:
    """The first other rank's reason, as "rank N: reason", or None if no other rank left one."""
    if not output_dir.is_dir():
        return None
    notes = sorted(
        (int(found.group(1)), path)
        for path in output_dir.iterdir()
        if (found := _NOTE.match(path.name)) is not None
    )
    for other, path in notes:
        if other != rank:
            return f"rank {other}: {path.read_text().strip()}"
    return None


def await_peer_failure(output_dir: Path, rank: int, seconds: float) -> str | None:
    """`peer_failure`, waiting up to `seconds` for one: a rank stuck in a collective behind a
    hung peer notices at about the same moment as the peer, and the peer's reason is the cause."""
    give_up = time.monotonic() + seconds
    while (found := peer_failure(output_dir, rank)) is None and time.monotonic() < give_up:
        time.sleep(0.05)
    return found


def clear_rank_notes(output_dir: Path) -> None:
    """Notes of an earlier attempt must not explain this one's failure."""
    if output_dir.is_dir():
        for path in output_dir.iterdir():
            if _NOTE.match(path.name):
                path.unlink(missing_ok=True)
