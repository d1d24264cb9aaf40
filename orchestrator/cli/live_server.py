"""Where the running `baton serve` processes of this machine keep their data, so a command that
opens the database directly (`baton token NAME`) finds the live server's instead of silently
making a second, empty one under the default data dir.

Each server writes `<user state dir>/baton/servers/<pid>.json` at start and removes it at exit;
a record whose process is gone (or is another process by now) is ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from orchestrator.cli.errors import CliError
from worker.proctime import seconds_after_boot

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.db import Database


def records_dir() -> Path:
    return Path(platformdirs.user_state_dir("baton")) / "servers"


def announce(data_dir: Path) -> None:
    """Record this process as a live server of `data_dir` (until it exits)."""
    record = records_dir() / f"{os.getpid()}.json"
    with contextlib.suppress(OSError):  # a read-only home: commands then need BATON_DATA_DIR
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(
            json.dumps({"data_dir": str(data_dir.resolve()), "started": seconds_after_boot()})
        )
        atexit.register(_forget, record)


def _forget(record: Path) -> None:
    record.unlink(missing_ok=True)


def live_data_dirs() -> list[Path]:
    """The data dirs of the servers running on this machine now."""
    found = set()
    for record in sorted(records_dir().glob("*.json")):
        try:
            data = json.loads(record.read_text())
            alive = seconds_after_boot(int(record.stem)) == data["started"]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            alive = False
        if alive:
            found.add(Path(data["data_dir"]))
    return sorted(found)


def server_settings() -> Settings:
    """The settings of the live server's data, for a command that opens its database.

    BATON_DATA_DIR wins; else the one live server's data dir; else the default, if it holds a
    database. Anything else is a one-line CliError, never a new database.
    """
    from orchestrator.config import Settings

    if os.environ.get("BATON_DATA_DIR"):
        return Settings()
    live = live_data_dirs()
    if len(live) > 1:
        shown = ", ".join(str(path) for path in live)
        raise CliError(f"several Baton servers run here ({shown}): set BATON_DATA_DIR to one")
    return Settings(data_dir=live[0]) if live else Settings()


def open_server_database(settings: Settings) -> Database:
    """The existing, migrated database of `settings`; CliError if there is none."""
    from sqlalchemy import inspect
    from sqlalchemy.exc import SQLAlchemyError

    from orchestrator.db import Database
    from orchestrator.private_files import sqlite_file

    missing = CliError(
        f"no Baton database in {settings.data_dir}: run this on the server's machine with its "
        "BATON_DATA_DIR (and BATON_DATABASE_URL), or while `baton serve` runs"
    )
    path = sqlite_file(settings.resolved_database_url)
    if path is not None and not path.is_file():
        raise missing
    db = Database(settings.resolved_database_url)
    try:
        migrated = inspect(db.engine).has_table("users")
    except SQLAlchemyError as exc:
        db.dispose()
        raise CliError(f"cannot open the database: {type(exc).__name__}") from None
    if not migrated:
        db.dispose()
        raise missing
    return db
