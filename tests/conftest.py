"""Shared fixtures: settings in a temp data dir, the API with and without its reconcile loop.

A test that uses a fixture marked `@starts_processes`, or calls one of STARTERS itself or through
a fixture, is marked `slow` (tests/support/marks.py): `make test-fast` leaves it out.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import settings as hypothesis_settings
from sqlalchemy import create_engine, text

from orchestrator.backends.local.backend import LocalBackend
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.migrate import upgrade
from orchestrator.private_files import sqlite_file
from orchestrator.reference import run_uninterrupted
from orchestrator.service import prestart
from tests.factories import (
    fast_emulator,
    live_server,
    make_settings,
    reference_digest,
    require_services,
    running_api,
)
from tests.kaggle_emulator import Emulator, start_emulator
from tests.scale.cluster import Cluster, RedisServer
from tests.support.chains import run_chain, run_segment, run_whole
from tests.support.databases import copy_migrated, seed_migrated
from tests.support.marks import starts_processes, starts_processes_in
from tests.support.segments import run_worker, start_worker, terminate_after_step
from tests.support.supervisors import end_leftover_supervisors

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes_in(item, STARTERS):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated-from-scratch database: SQLite in a temp dir, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    schema = f"t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_URL)
    try:
        with admin.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:
        admin.dispose()
        if require_services():
            raise
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite database of its own, for engine tests without the API."""
    copy_migrated(tmp_path / "baton.db")
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    yield database
    database.dispose()


@pytest.fixture
def migrated_db(database_url: str) -> Iterator[Database]:
    """`database_url` migrated, as a Database: SQLite (a copy of one migrated once per test
    process), and PostgreSQL where it runs."""
    file = sqlite_file(database_url)
    if file is not None:
        copy_migrated(file)
    upgrade(database_url)
    database = Database(database_url)
    yield database
    database.dispose()
