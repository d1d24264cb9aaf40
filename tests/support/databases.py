"""A migrated database per test, cloned from one migrated once per test process.

Alembic from scratch costs about 0.6 s a test on SQLite and more on PostgreSQL; a clone of its
result costs a millisecond (SQLite: a file copy) or a `CREATE DATABASE … TEMPLATE` (PostgreSQL),
and `prestart` on it then finds the schema at head and applies nothing. Migrating from scratch
keeps its own tests (tests/migrations, on an empty database). Under pytest-xdist each worker
process builds its own templates.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import psutil
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from orchestrator.config import Settings
from orchestrator.migrate import upgrade
from orchestrator.private_files import sqlite_file

# This machine's PostgreSQL (trust auth); each test gets a database or a schema of its own in it.
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


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


@functools.cache
def _postgres_admin() -> Engine:
    # CREATE and DROP DATABASE cannot run inside a transaction.
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    atexit.register(admin.dispose)
    return admin


def _postgres_database(name: str) -> str:
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"


def _drop_database(name: str) -> None:
    with _postgres_admin().connect() as connection:
        connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@functools.cache
def _dropper() -> queue.Queue[str]:
    """Clones to drop, dropped one by one by a background thread: a DROP DATABASE waits on the
    disk (20 ms to most of a second here), and no test needs to wait for it. The test process
    waits for the last drop at exit."""
    pending: queue.Queue[str] = queue.Queue()

    def drop_each() -> None:
        while True:
            name = pending.get()
            try:
                _drop_database(name)
            except SQLAlchemyError as exc:
                print(f"could not drop the test database {name}: {exc}", file=sys.stderr)
            finally:
                pending.task_done()

    threading.Thread(target=drop_each, name="drop-test-databases", daemon=True).start()
    atexit.register(pending.join)
    return pending


# A template or a clone is named after the test process that made it, `t_<pid>_<random>`, so that
# one left by a process that was killed (a timeout, a mutmut fork, Ctrl-C) is dropped by the next.
CLONE_PREFIX = "t_"


def _clone_name() -> str:
    return f"{CLONE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"


def _owner_is_gone(name: str) -> bool:
    named = re.fullmatch(rf"{CLONE_PREFIX}(\d+)_[0-9a-f]{{8}}", name)
    return named is not None and not psutil.pid_exists(int(named[1]))


def _drop_orphaned_clones() -> None:
    """Queue for dropping every template and clone whose test process no longer runs."""
    with _postgres_admin().connect() as connection:
        names = connection.execute(
            text("SELECT datname FROM pg_database WHERE datname LIKE :prefix"),
            {"prefix": CLONE_PREFIX.replace("_", "\\_") + "%"},
        ).scalars()
        for name in names:
            if _owner_is_gone(name):
                _dropper().put(name)


@functools.cache
def postgres_template() -> str:
    """A PostgreSQL database migrated to head, made on first use and dropped at exit. Nothing
    stays connected to it (Alembic runs on a NullPool), so it can be a template. Databases that
    killed test processes left behind are dropped on the way."""
    _drop_orphaned_clones()
    name = _clone_name()
    with _postgres_admin().connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    atexit.register(_drop_database, name)
    upgrade(_postgres_database(name))
    return name


def _clone(template: str) -> str:
    name = _clone_name()
    with _postgres_admin().connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name} TEMPLATE {template}"))
    return name


class _ClonesAhead:
    """Clones made ahead by a background thread, `READY` at a time: a `CREATE DATABASE …
    TEMPLATE` waits on the disk (0.2 to 0.5 s on some VMs), and a test that takes a clone made
    while the one before it ran does not wait for it. At exit the thread stops making them and
    those made are dropped; one it cannot finish within `STOP_SECONDS` is an orphan, which the next
    test process drops."""

    READY = 2
    STOP_SECONDS = 10.0

    def __init__(self, template: str) -> None:
        self.owner = os.getpid()
        self.ready: queue.Queue[str | SQLAlchemyError] = queue.Queue(maxsize=self.READY)
        self.stopping = threading.Event()
        self.maker = threading.Thread(
            target=self._make, args=(template,), name="clone-ahead", daemon=True
        )
        self.maker.start()
        atexit.register(self._drop_unused)

    def take(self) -> str:
        made = self.ready.get()
        if isinstance(made, SQLAlchemyError):
            self.ready.put(made)  # the thread has stopped: every later test gets the error too
            raise made
        return made

    def _make(self, template: str) -> None:
        while not self.stopping.is_set():
            try:
                self.ready.put(_clone(template))
            except SQLAlchemyError as exc:
                self.ready.put(exc)
                return

    def _drop_unused(self) -> None:
        # Dropping one frees a place the thread would fill again: it stops first.
        self.stopping.set()
        self._drop_ready()  # a thread waiting to put its clone can, and then sees the stop
        self.maker.join(self.STOP_SECONDS)
        self._drop_ready()

    def _drop_ready(self) -> None:
        while True:
            try:
                made = self.ready.get_nowait()
            except queue.Empty:
                return
            if isinstance(made, str):
                _drop_database(made)  # now: the dropper's thread may be done by this point


_ahead: _ClonesAhead | None = None


@contextmanager
def cloned_postgres() -> Iterator[str]:
    """A PostgreSQL database of its own, migrated (a clone of the template); yields its URL.
    Raises if PostgreSQL is unreachable."""
    global _ahead
    template = postgres_template()
    if _ahead is None or _ahead.owner != os.getpid():  # a forked child (mutmut's) makes its own
        _ahead = _ClonesAhead(template)
    name = _ahead.take()
    try:
        yield _postgres_database(name)
    finally:
        _dropper().put(name)


@contextmanager
def postgres_schema(base_url: str = POSTGRES_URL, schema: str | None = None) -> Iterator[str]:
    """A fresh, empty schema (named `schema`, or at random); yields a URL whose connections use
    it. Raises if unreachable."""
    schema = schema or f"t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base_url)
    try:
        with admin.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {schema}"))
        yield f"{base_url}?options=-csearch_path%3D{schema}"
    finally:
        try:
            with admin.begin() as connection:
                connection.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        finally:
            admin.dispose()


def enter_postgres(stack: ExitStack, postgres: Callable[[], AbstractContextManager[str]]) -> str:
    """`postgres()` (a clone or an empty schema) entered on `stack`: its URL. Where PostgreSQL is
    unreachable the test is skipped, or fails in CI (BATON_REQUIRE_SERVICES=1)."""
    import pytest

    from tests.factories import require_services

    try:
        return stack.enter_context(postgres())
    except OperationalError as exc:
        if require_services():
            raise
        pytest.skip(f"PostgreSQL not reachable: {exc}")
