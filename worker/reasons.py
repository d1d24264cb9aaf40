"""Failure reasons users read (a segment's error, a job's reason): one line, no server paths.

The full traceback goes to the session log, which only the job's owner can read. The
orchestrator uses the same rule for the reasons it writes itself.
"""

from __future__ import annotations

import re

from worker.boundary.text import MAX_REASON_CHARS

# An absolute POSIX path of two parts or more; only its last part is kept.
_PATH = re.compile(r"(?<![\w.~-])/(?:[^\s/'\"():,;]+/)+([^\s/'\"():,;]*)")


def without_paths(text: str) -> str:
    return _PATH.sub(lambda match: f"…/{match.group(1)}", text)


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` on one line, paths shortened to their last part, clipped to `limit`."""
    flat = " ".join(without_paths(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def reason_for(exc: BaseException) -> str:
    """`ValueError: what went wrong`, as a user should see it."""
    message = str(exc)
    return one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
