"""Failure reasons users read (a segment's error, a job's reason): one line, no server paths.

The full traceback goes to the session log, which only the job's owner can read. The
orchestrator uses the same rule for the reasons it writes itself.
"""

from __future__ import annotations

import re

from worker.boundary.text import MAX_REASON_CHARS

# What PostgreSQL text and UTF-8 cannot hold: NUL, and surrogate code points (never valid alone).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# An absolute POSIX path of two parts or more; only its last part is kept.
_PATH = re.compile(r"(?<![\w.~-])/(?:[^\s/'\"():,;]+/)+([^\s/'\"():,;]*)")


def without_paths(text: str) -> str:
    return _PATH.sub(lambda match: f"…/{match.group(1)}", text)


def storable(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD, so both databases accept it.

    The one rule for text written to the database: reasons, events and log lines.
    """
    return _UNSTORABLE.sub("\ufffd", text)


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` on one line, paths shortened to their last part, clipped to `limit`."""
    flat = " ".join(without_paths(storable(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def reason_for(exc: BaseException) -> str:
    """`ValueError: what went wrong`, as a user should see it."""
    message = str(exc)
    return one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
