"""/healthz says which part is down (a database that refuses writes included); /readyz too;
/livez only that the process answers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from fastapi.testclient import TestClient

from orchestrator.api.main import create_app
from orchestrator.config import Settings
from orchestrator.migrate import alembic_config
from orchestrator.service import build_services, prestart
from tests.factories import make_settings


@contextmanager
def _serving(settings: Settings, database_url: str | None = None) -> Iterator[TestClient]:
    """The API over `settings`, already prepared, reading the database through `database_url`."""
    if database_url is not None:
        settings = make_settings(settings.data_dir, database_url=database_url)
    services = build_services(settings, embedded_loop=False)
    try:
        with TestClient(create_app(services)) as client:
            yield client
    finally:
        services.db.dispose()


def test_a_healthy_service(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(tmp_path / "data", database_url=database_url)
    prestart(settings)
    with _serving(settings) as api:
        health = api.get("/healthz")
        assert health.status_code == 200
        assert health.json()["checks"] == {"database": "ok", "data_dir": "ok"}
        ready = api.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "schema_state": "ok"}


def test_a_read_only_sqlite_database_is_unhealthy(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    prestart(settings)
    read_only = f"sqlite:///file:{settings.data_dir / 'baton.db'}?mode=ro&uri=true"
    with _serving(settings, read_only) as api:
        health = api.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "unhealthy"
        assert health.json()["checks"] == {"database": "read-only", "data_dir": "ok"}
        assert str(tmp_path) not in health.text
        # Still readable: a load balancer may keep sending reads.
        assert api.get("/readyz").status_code == 200
        # And alive: a restart policy that probes /livez must not kill it for the database.
        assert api.get("/livez").json() == {"status": "alive"}


def test_a_read_only_postgresql_database_is_unhealthy(tmp_path: Path, database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        return  # the SQLite case is the test above; this one needs a server
    settings = make_settings(tmp_path / "data", database_url=database_url)
    prestart(settings)
    # A libpq option on the URL: every connection then starts read-only.
    joiner = "%20" if "options=" in database_url else "?options="
    read_only = f"{database_url}{joiner}-cdefault_transaction_read_only%3Don"
    with _serving(settings, read_only) as api:
        health = api.get("/healthz")
        assert health.status_code == 503
        assert health.json()["checks"]["database"] == "read-only"


def test_an_unreachable_database_and_a_lost_data_dir_are_named(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    prestart(settings)
    unreachable = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    with _serving(settings, unreachable) as api:
        shutil.rmtree(settings.data_dir)
        health = api.get("/healthz")
        assert health.status_code == 503
        assert health.json()["checks"] == {"database": "unreachable", "data_dir": "not writable"}
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["schema_state"] == "unreachable"


def test_a_database_behind_the_code_is_not_ready(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(tmp_path / "data", database_url=database_url)
    prestart(settings)
    command.downgrade(alembic_config(database_url), "0002")
    with _serving(settings) as api:
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["schema_state"] == "behind"
