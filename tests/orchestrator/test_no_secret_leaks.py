"""No secret leaks: the Kaggle key, API tokens and the encryption key stay out of logs, output,
API responses and the database file, with every logger at DEBUG."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from orchestrator.auth import get_or_create_user, issue_token
from orchestrator.config import Settings
from orchestrator.credentials import KaggleCredentials, load_kaggle_credentials
from orchestrator.db import Database
from orchestrator.service import build_secret_box
from tests.factories import ADMIN_TOKEN, auth, job_spec, running_api

ADMIN_KAGGLE_KEY = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
BOB_KAGGLE_KEY = "KGAT_bobs-very-own-kaggle-key-55"


def _exercise_the_api(api: TestClient, settings: Settings, bob_token: str) -> list[Response]:
    """Everything a user does with secrets in play: credentials, jobs, and a few mistakes."""
    bob = auth(bob_token)
    creds = "/api/v1/credentials/kaggle"
    responses = [
        api.put(creds, json={"username": "admin-k", "key": ADMIN_KAGGLE_KEY}),
        api.get(creds),
        api.put(creds, json={"username": "bad name", "key": ADMIN_KAGGLE_KEY}),
        api.put(creds, json={"username": "admin-k", "key": ADMIN_KAGGLE_KEY + " "}),
        api.put(creds, json={"username": "bob-k", "key": BOB_KAGGLE_KEY}, headers=bob),
        api.get(creds, headers=bob),
        api.get(creds, headers=auth(bob_token + "x")),
        api.post("/api/v1/jobs", json=job_spec()),
        api.post("/api/v1/jobs", json=job_spec(name="bobs"), headers=bob),
        api.post("/api/v1/jobs", json=job_spec(total_steps=-1)),
        api.get("/api/v1/jobs"),
        api.get("/api/v1/jobs", headers=bob),
        api.get("/healthz"),
    ]
    job_id = responses[7].json()["id"]
    responses += [api.get(f"/api/v1/jobs/{job_id}"), api.get(f"/api/v1/jobs/{job_id}/events")]
    assert [r.status_code for r in responses[:9]] == [200, 200, 422, 422, 200, 200, 401, 201, 201]
    return responses


def _database_bytes(settings: Settings) -> bytes:
    path = settings.data_dir / "baton.db"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(FULL)")
    connection.close()
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_no_secret_reaches_logs_output_responses_or_the_database(
    settings: Settings, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)  # the root logger: every library's DEBUG records too
    # Libraries that quiet themselves (SQLAlchemy sets WARN on "sqlalchemy") are opened up too,
    # so SQL statements and their parameters are in the capture.
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and logger.level > logging.DEBUG:
            caplog.set_level(logging.DEBUG, logger=name)
    with running_api(settings, embedded_loop=False) as api:
        db = Database(settings.resolved_database_url)
        with db.transaction() as session:
            bob_token = issue_token(session, "bob")
        responses = _exercise_the_api(api, settings, bob_token)
        with db.transaction() as session:
            admin_id = get_or_create_user(session, "admin").id
            loaded = load_kaggle_credentials(session, build_secret_box(settings), admin_id)
        # What a backend might log while it launches a kernel.
        logging.getLogger("orchestrator.backends").debug("launching with %r", loaded)
        db.dispose()

    encryption_key = settings.secret_key_file.read_text().strip()
    secrets = {
        "admin Kaggle key": ADMIN_KAGGLE_KEY,
        "bob's Kaggle key": BOB_KAGGLE_KEY,
        "admin token": ADMIN_TOKEN,
        "bob's token": bob_token,
        "encryption key": encryption_key,
    }
    out, err = capfd.readouterr()
    records = "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
    )
    bodies = "\n".join(f"{r.headers!r} {r.text}" for r in responses)
    database = _database_bytes(settings)

    # Positive controls: the capture sees SQL, and the file holds what was stored around the key.
    assert any(r.name.startswith("sqlalchemy.engine") for r in caplog.records), "not capturing"
    assert b"admin-k" in database
    assert b"bob-k" in database
    for name, secret in secrets.items():
        assert secret not in records + caplog.text, f"{name} in a log record"
        assert secret not in out + err, f"{name} in stdout/stderr"
        assert secret not in bodies, f"{name} in an API response"
        assert secret.encode() not in database, f"{name} in the database file"
    assert loaded == KaggleCredentials("admin-k", ADMIN_KAGGLE_KEY)


def test_repr_of_credentials_hides_the_key() -> None:
    credentials = KaggleCredentials("admin-k", ADMIN_KAGGLE_KEY)
    assert repr(credentials) == "KaggleCredentials(username='admin-k', key=<hidden>)"
    assert ADMIN_KAGGLE_KEY not in f"{credentials} {[credentials]} {credentials!s}"
