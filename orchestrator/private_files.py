"""Keeps the data directory private to the user who runs Baton.

The directory holds the database, session logs (a trainer may print anything), checkpoints and
key files. The process umask makes everything created from here on 0600/0700; a data directory
left by an older version is tightened once at start-up.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
_GROUP_OTHER = stat.S_IRWXG | stat.S_IRWXO


def make_private(data_dir: Path, sqlite_file: Path | None) -> None:
    """Set the umask, create the data dir 0700 and the SQLite file 0600, tighten what exists."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten_tree(data_dir)
    if sqlite_file is not None:
        sqlite_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # SQLite gives its -wal and -shm files the database file's mode.
        os.close(os.open(sqlite_file, os.O_RDWR | os.O_CREAT, 0o600))
        _tighten(sqlite_file)


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _tighten(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & _GROUP_OTHER:
            path.chmod(stat.S_IMODE(mode) & ~_GROUP_OTHER)
    except OSError as exc:  # another user's file, or gone meanwhile: report, go on
        log.warning("could not make %s private: %s", path, exc.strerror)


def _tighten_tree(root: Path) -> None:
    _tighten(root)
    for directory, names, files in os.walk(root):
        for name in [*names, *files]:
            _tighten(Path(directory) / name)
