"""Whose Kaggle account a job uses, and what a job does when Kaggle refuses it: two users with
two accounts, a key Kaggle answers 401, and a source that cannot be mounted. Through the API and its
reconcile loop, against the emulator (which records who made every call)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.backends.kaggle.backend import dataset_slug, kernel_slug
from orchestrator.config import Settings
from orchestrator.db import Database
from tests.factories import (
    FAST_EMULATOR,
    auth,
    event_kinds,
    kaggle_spec,
    make_settings,
    running_api,
    wait_finished,
    wait_for,
)
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.marks import starts_processes

pytestmark = pytest.mark.slow

USERS = {"alice": "alice-key", "bob": "bob-key"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")


@pytest.fixture
@starts_processes
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with start_emulator(tmp_path / "kaggle", **FAST_EMULATOR, users=dict(USERS)) as running:
        yield running


@pytest.fixture
def api(settings: Settings, emulator: Emulator) -> Iterator[TestClient]:
    with running_api(settings, kaggle_url=emulator.url) as client:
        yield client


def _token_for(settings: Settings, name: str) -> dict[str, str]:
    from orchestrator.auth import issue_token

    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        token = issue_token(session, name)
    db.dispose()
    return auth(token)


def _segments(api: TestClient, job_id: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(
        f"/api/v1/jobs/{job_id}/segments", headers=headers
    ).json()
    return segments


def test_each_users_job_runs_on_that_users_own_kaggle_account(
    api: TestClient, emulator: Emulator, settings: Settings
) -> None:
    headers = {"alice": auth(), "bob": _token_for(settings, "bob")}
    jobs: dict[str, str] = {}
    for user, key in USERS.items():
        response = api.put(
            "/api/v1/credentials/kaggle",
            json={"username": user, "key": key},
            headers=headers[user],
        )
        assert response.status_code == 200, response.text
        spec = kaggle_spec(total_steps=100_000, session={"limit_seconds": 20})
        response = api.post("/api/v1/jobs", json=spec | {"name": user}, headers=headers[user])
        jobs[user] = response.json()["id"]

    def pushed(user: str) -> bool:
        return bool(emulator.sessions(f"{user}/{kernel_slug(jobs[user])}"))

    for user in USERS:
        wait_for(api, jobs[user], lambda _, user=user: pushed(user), timeout=60)  # type: ignore[misc]
    for user in USERS:
        api.post(f"/api/v1/jobs/{jobs[user]}/cancel", headers=headers[user])

    # Each job's kernel lives under its owner's account, pushed with its owner's key, and
    # nothing of one user's job was ever created under the other's account.
    assert emulator.push_counts == {f"{user}/{kernel_slug(jobs[user])}": 1 for user in USERS}
    for user, other in (("alice", "bob"), ("bob", "alice")):
        [session] = emulator.sessions(f"{user}/{kernel_slug(jobs[user])}")
        assert session.owner == user
        assert emulator.sessions(f"{other}/{kernel_slug(jobs[user])}") == []
        assert emulator.dataset(f"{other}/{dataset_slug(jobs[user])}") is None
        assert {c.user for c in emulator.calls("SaveKernel", user=user)} == {user}
    assert {c.user for c in emulator.calls("SaveKernel")} == set(USERS)
    assert len(emulator.calls("SaveKernel")) == 2
    assert {c.user for c in emulator.calls("GetAcceleratorQuotaStatistics")} == set(USERS)


def test_a_key_kaggle_answers_401_fails_the_job_once_with_the_reason(
    api: TestClient, emulator: Emulator
) -> None:
    response = api.put(
        "/api/v1/credentials/kaggle", json={"username": "alice", "key": "revoked-key"}
    )
    assert response.status_code == 200, response.text
    job_id = api.post("/api/v1/jobs", json=kaggle_spec()).json()["id"]
    job = wait_finished(api, job_id, timeout=60)

    assert job["state"] == "failed"
    # The user's to fix, not a bug in Baton: the reason names Kaggle's refusal, once.
    assert job["reason"] == (
        "kaggle refused: GetAcceleratorQuotaStatistics: Kaggle refused access (401)"
    )
    assert "revoked-key" not in str(job)
    assert emulator.push_counts == {}
    kinds = event_kinds(api, job_id)
    assert kinds == ["submitted", "failed"]
    assert emulator.callers <= {"alice"}


def test_a_source_that_cannot_be_mounted_fails_the_job_without_a_push(
    api: TestClient, emulator: Emulator
) -> None:
    api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
    spec = kaggle_spec({"dataset_sources": ["alice/no-such-dataset"]}, retry={"max_failures": 0})
    job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(api, job_id, timeout=60)

    assert job["state"] == "failed"
    assert "dataset source alice/no-such-dataset does not exist" in job["reason"]
    [segment] = _segments(api, job_id, auth())
    assert segment["state"] == "failed"
    assert segment["error"].startswith("launch refused: dataset source alice/no-such-dataset")
    # Refused before any push, and final: nothing is pushed later either.
    assert emulator.push_counts == {}
