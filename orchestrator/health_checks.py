"""Probes behind /healthz and /readyz: can the service write its database and its data dir.

A probe answers with a short word for the public endpoint ("ok", "read-only", "unreachable",
"not writable", "behind"); the detail goes to the server log, never into the answer.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError

from orchestrator.db import Database
from orchestrator.migrate import alembic_config
from orchestrator.models import ApiToken

log = logging.getLogger(__name__)

OK = "ok"


def _database_problem(exc: DBAPIError) -> str:
    message = str(exc.orig).lower()
    return "read-only" if "read-only" in message or "readonly" in message else "unreachable"


def database_can_write(db: Database) -> str:
    """Run a write that changes nothing (an UPDATE of no row) and roll it back."""
    try:
        with db.engine.connect() as connection, connection.begin() as transaction:
            connection.execute(update(ApiToken).where(ApiToken.id == "").values(name=ApiToken.name))
            transaction.rollback()
    except DBAPIError as exc:
        log.warning("health: the database refused a write: %s", exc.orig)
        return _database_problem(exc)
    return OK


def directory_can_write(directory: Path) -> str:
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".healthz-"):
            pass
    except OSError as exc:
        log.warning("health: cannot write in the data directory: %s", exc.strerror)
        return "not writable"
    return OK


def schema_is_current(db: Database) -> str:
    """The database answers a read and carries the code's newest migration."""
    head = ScriptDirectory.from_config(alembic_config(db.url)).get_current_head()
    try:
        with db.engine.connect() as connection:
            current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError as exc:
        log.warning("readiness: the database did not answer: %s", exc.orig)
        return "unreachable"
    return OK if current == head else "behind"
