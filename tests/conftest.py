"""Shared fixtures: settings in a temp data dir, the API with and without its reconcile loop.

A test that uses a fixture marked `@starts_processes`, or calls one of STARTERS itself or through
a fixture, is marked `slow` (tests/support/marks.py): `make test-fast` leaves it out.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import settings as hypothesis_settings

from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.local.sessions import start_session
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.private_files import sqlite_file
from orchestrator.reference import run_uninterrupted
from orchestrator.service import prestart
from tests.factories import (
    fast_emulator,
    live_server,
    make_settings,
    reference_digest,
    running_api,
)
from tests.kaggle_emulator import Emulator, start_emulator
from tests.scale.cluster import Cluster, RedisServer
from tests.support.chains import run_chain, run_segment, run_whole
from tests.support.databases import (
    cloned_postgres,
    copy_migrated,
    enter_postgres,
    postgres_schema,
    seed_migrated,
)
from tests.support.marks import starts_processes, starts_processes_in
from tests.support.schedule import record_durations, recorded, start_order, workers_and_cores
from tests.support.segments import run_worker, start_worker, terminate_after_step
from tests.support.serve import baton_serve
from tests.support.supervisors import end_leftover_supervisors

# Property-based tests (Hypothesis). "ci", the default everywhere: the same examples on every run
# (derandomized, no example database), so a failure in CI is reproduced by running the test
# again, and no per-example deadline (no test depends on the machine's speed). "explore": new
# random examples, ten times as many; `BATON_HYPOTHESIS_PROFILE=explore pytest tests/...` to
# hunt for a counterexample the fixed ones miss (Hypothesis prints it to add as an @example).
hypothesis_settings.register_profile("ci", derandomize=True, database=None, deadline=None)
hypothesis_settings.register_profile("explore", max_examples=1000, deadline=None)
hypothesis_settings.load_profile(os.environ.get("BATON_HYPOTHESIS_PROFILE", "ci"))


# What starts a training session, a server, a cluster or any process when called (a test that
# uses the subprocess module starts a process).
STARTERS = (
    subprocess,
    LocalBackend,
    start_session,
    baton_serve,
    start_emulator,
    fast_emulator,
    live_server,
    run_uninterrupted,
    reference_digest,
    run_worker,
    start_worker,
    terminate_after_step,
    run_whole,
    run_segment,
    run_chain,
    Cluster,
    RedisServer,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes_in(item, STARTERS):
            item.add_marker(pytest.mark.slow)
    start_order(items, recorded(config), *workers_and_cores())


_MEASURED: dict[str, float] = {}
# Tests that failed or were skipped: their seconds say nothing of how long they take.
_UNMEASURED: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under pytest-xdist the workers' reports reach the controlling process too.
    _MEASURED[report.nodeid] = _MEASURED.get(report.nodeid, 0.0) + report.duration
    if not report.passed:
        _UNMEASURED.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controlling process only
        measured = {name: s for name, s in _MEASURED.items() if name not in _UNMEASURED}
        record_durations(session.config, measured)


@pytest.fixture(scope="session", autouse=True)
def _no_supervisor_outlives_the_run() -> Iterator[None]:
    yield
    end_leftover_supervisors()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")


@pytest.fixture
def store(settings: Settings) -> Iterator[Database]:
    """The migrated database behind `settings`, as `baton serve` leaves it after prestart."""
    seed_migrated(settings)
    prestart(settings)
    database = Database(settings.resolved_database_url)
    yield database
    database.dispose()


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    """The API alone: jobs are stored but never launched."""
    with running_api(settings, embedded_loop=False) as client:
        yield client


@pytest.fixture
@starts_processes
def live_api(settings: Settings) -> Iterator[TestClient]:
    """The API with its embedded reconcile loop: jobs really run as local sessions."""
    with running_api(settings) as client:
        yield client


@pytest.fixture
@starts_processes
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    """A Kaggle API emulator with account alice, fast dataset processing and a 30 h GPU week."""
    with start_emulator(
        tmp_path / "kaggle",
        queue_seconds=0.2,
        dataset_processing_seconds=0.5,
        dataset_not_found_seconds=0.3,
    ) as running:
        yield running


@pytest.fixture
def kaggle_api(settings: Settings, emulator: Emulator) -> Iterator[TestClient]:
    """The API with its loop and the admin's Kaggle credentials, calling the emulator."""
    with running_api(settings, kaggle_url=emulator.url) as client:
        response = client.put(
            "/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"}
        )
        assert response.status_code == 200, response.text
        yield client


def _database_of_its_own(
    dialect: str, tmp_path: Path, postgres: Callable[[], AbstractContextManager[str]]
) -> Iterator[str]:
    """A SQLite file path in the test's temp dir, or the URL of `postgres()` while the test runs."""
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    with ExitStack() as stack:
        yield enter_postgres(stack, postgres)


DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of this test's own: a SQLite file path (the migrated template is copied there
    by `migrated_db` or `seed_migrated`, tests/support/databases.py), or a PostgreSQL database
    cloned from one migrated once per test process."""
    yield from _database_of_its_own(request.param, tmp_path, cloned_postgres)


@pytest.fixture(scope="module", params=DIALECTS)
def module_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database for a module's tests that change nothing in it (probes that must be answered
    404 or 422), as `database_url` makes one."""
    yield from _database_of_its_own(request.param, tmp_path_factory.mktemp("db"), cloned_postgres)


@pytest.fixture(params=DIALECTS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database, for migrating from scratch: SQLite in a temp dir, or a fresh
    PostgreSQL schema."""
    yield from _database_of_its_own(request.param, tmp_path, postgres_schema)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite database of its own, for engine tests without the API."""
    copy_migrated(tmp_path / "baton.db")
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    yield database
    database.dispose()


@pytest.fixture
def migrated_db(database_url: str) -> Iterator[Database]:
    """`database_url` migrated, as a Database: SQLite and PostgreSQL (where it runs), each a
    clone of one migrated once per test process."""
    file = sqlite_file(database_url)
    if file is not None:
        copy_migrated(file)
    database = Database(database_url)
    yield database
    database.dispose()
