"""The end of a session log, read from the end: memory bounded by what is asked, whatever the
file's size (a trainer may write hundreds of MiB)."""

from __future__ import annotations

import os
from pathlib import Path

# UTF-8 takes at most 4 bytes per character.
_MAX_BYTES_PER_CHAR = 4


def read_tail(path: Path, chars: int) -> str:
    """The last `chars` characters of the file (undecodable bytes replaced). Raises OSError."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - chars * _MAX_BYTES_PER_CHAR)
        f.seek(start)
        data = f.read(size - start)
    text = data.decode("utf-8", errors="replace")
    return text[-chars:] if chars else ""


def last_line(path: Path, limit: int = 4000) -> str:
    """The log's last non-empty line within its last `limit` characters: for a crash, the
    exception."""
    try:
        lines = read_tail(path, limit).strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
