"""Reading a session log without reading all of it: its end (memory bounded by what is asked,
whatever the file's size; a trainer may write hundreds of MiB), or the whole lines written since
a byte offset, so a follower prints every line once and never re-reads the log."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# UTF-8 takes at most 4 bytes per character.
_MAX_BYTES_PER_CHAR = 4
# The most one read from an offset returns; a follower asks again from where it stopped.
MAX_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class LogChunk:
    text: str
    next_offset: int  # where the next read starts: the byte after the last whole line returned


def read_tail(path: Path, chars: int) -> str:
    """The last `chars` characters of the file (undecodable bytes replaced). Raises OSError."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - chars * _MAX_BYTES_PER_CHAR)
        f.seek(start)
        data = f.read(size - start)
    text = data.decode("utf-8", errors="replace")
    return text[-chars:] if chars else ""


def read_from(path: Path, offset: int, *, ended: bool, limit: int = MAX_CHUNK_BYTES) -> LogChunk:
    """The whole lines from byte `offset` on, at most `limit` bytes of them. A line still being
    written is left for the next read, unless the session has `ended` (then nothing more comes).
    A line longer than `limit` is returned in pieces. Raises OSError."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = min(max(0, offset), size)
        f.seek(start)
        data = f.read(min(limit, size - start))
    complete = start + len(data) == size and ended
    if not complete:
        cut = data.rfind(b"\n") + 1
        if cut or len(data) < limit:
            data = data[:cut]
    return LogChunk(data.decode("utf-8", errors="replace"), start + len(data))


def last_line(path: Path, limit: int = 4000) -> str:
    """The log's last non-empty line within its last `limit` characters: for a crash, the
    exception."""
    try:
        lines = read_tail(path, limit).strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
