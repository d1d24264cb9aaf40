"""A migrated SQLite database per test, copied from one migrated once per test process.

Alembic from scratch costs about 0.6 s a test on this machine; a copy of its result costs a
millisecond, and `prestart` on it then finds the schema at head and applies nothing. Migrating
from scratch keeps its own tests (tests/migrations, and every test on the `database_url`
fixture). Under pytest-xdist each worker process builds its own template.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.migrate import upgrade
from orchestrator.private_files import sqlite_file


@functools.cache
def migrated_template() -> Path:
    """A SQLite file migrated to head, made on first use and removed at exit."""
    directory = Path(tempfile.mkdtemp(prefix="baton-test-template-"))
    atexit.register(shutil.rmtree, directory, True)
    template = directory / "migrated.db"
    upgrade(f"sqlite:///{template}")
    return template


def copy_migrated(target: Path) -> None:
    """Put a migrated SQLite database at `target` (0600, in a 0700 directory) unless one is."""
    if target.exists():
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(migrated_template(), target)
    target.chmod(0o600)


def seed_migrated(settings: Settings) -> None:
    """Before `prestart`: `settings`' SQLite database, migrated, if it has none yet."""
    file = sqlite_file(settings.resolved_database_url)
    if file is not None:
        copy_migrated(file)
