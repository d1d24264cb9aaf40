"""API tokens: created, listed without their secret, revoked at once, expired, rotated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from orchestrator.api import deps
from orchestrator.auth import hash_token, issue_token
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.migrate import alembic_config
from orchestrator.models import ApiToken
from tests.factories import ADMIN_TOKEN, auth, make_settings, running_api

URL = "/api/v1/tokens"


def _new(
    api: TestClient, headers: dict[str, str] | None = None, **body: object
) -> dict[str, object]:
    response = api.post(URL, json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


def test_a_new_token_works_and_is_listed_without_its_secret(api: TestClient) -> None:
    created = _new(api, name="laptop")
    token = str(created["token"])
    assert token.startswith("bt_")
    assert api.get("/api/v1/jobs", headers=auth(token)).status_code == 200

    listing = api.get(URL, headers=auth(token))
    assert listing.status_code == 200
    assert token not in listing.text
    assert ADMIN_TOKEN not in listing.text
    rows = {row["id"]: row for row in listing.json()}
    assert rows[created["id"]]["name"] == "laptop"
    assert rows[created["id"]]["current"] is True
    assert rows[created["id"]]["last_used_at"] is not None
    bootstrap = [row for row in rows.values() if row["bootstrap"]]
    assert len(bootstrap) == 1
    assert bootstrap[0]["current"] is False


def test_a_revoked_token_gets_401_at_once(api: TestClient) -> None:
    created = _new(api)
    token = str(created["token"])
    assert api.get("/api/v1/jobs", headers=auth(token)).status_code == 200

    assert api.delete(f"{URL}/{created['id']}").status_code == 204
    assert api.get("/api/v1/jobs", headers=auth(token)).status_code == 401
    assert api.delete(f"{URL}/{created['id']}").status_code == 404
    assert created["id"] not in {row["id"] for row in api.get(URL).json()}


def test_a_token_can_revoke_itself(api: TestClient) -> None:
    created = _new(api)
    own = auth(str(created["token"]))
    assert api.delete(f"{URL}/{created['id']}", headers=own).status_code == 204
    assert api.get(URL, headers=own).status_code == 401


def test_nobody_sees_or_revokes_another_users_tokens(api: TestClient, store: Database) -> None:
    with store.transaction() as session:
        bob = auth(issue_token(session, "bob"))
    admins = api.get(URL).json()
    bobs = api.get(URL, headers=bob).json()
    assert {row["id"] for row in admins}.isdisjoint(row["id"] for row in bobs)
    for row in admins:
        assert api.delete(f"{URL}/{row['id']}", headers=bob).status_code == 404
    assert api.get("/api/v1/jobs").status_code == 200


def test_the_start_up_token_is_rotated_by_configuration_not_here(api: TestClient) -> None:
    bootstrap = next(row for row in api.get(URL).json() if row["bootstrap"])
    response = api.delete(f"{URL}/{bootstrap['id']}")
    assert response.status_code == 409
    assert "BATON_ADMIN_TOKEN" in response.json()["detail"]


def test_an_expired_token_gets_401(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token created through the API with an expiry works until that second, then gets 401:
    only the API's clock moves, nothing is written to the database behind it."""
    expires_at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    token = auth(str(_new(api, expires_at=expires_at.isoformat())["token"]))
    assert api.get("/api/v1/jobs", headers=token).status_code == 200
    monkeypatch.setattr(deps, "utcnow", lambda: expires_at - timedelta(seconds=1))
    assert api.get("/api/v1/jobs", headers=token).status_code == 200
    monkeypatch.setattr(deps, "utcnow", lambda: expires_at)
    assert api.get("/api/v1/jobs", headers=token).status_code == 401
    assert api.get("/api/v1/jobs").status_code == 200  # the admin's token does not expire


@pytest.mark.parametrize(
    "body",
    [
        {"expires_at": "2001-01-01T00:00:00Z"},
        {"expires_at": "2999-01-01T00:00:00"},  # no UTC offset
        {"expires_at": "2999-01-01T00:00:00Z"},  # too far
        {"name": "x\x00"},
        {"name": ""},
        {"token": "bt_mine"},
    ],
)
def test_bad_token_requests_get_422(api: TestClient, body: dict[str, object]) -> None:
    assert api.post(URL, json=body).status_code == 422


@pytest.mark.parametrize("token_id", ["%00", "x" * 10_000, "t%00", "%ED%A0%80"])
def test_odd_token_ids_get_404_or_422(api: TestClient, token_id: str) -> None:
    assert api.delete(f"{URL}/{token_id}").status_code in (404, 422)


def test_a_new_admin_token_retires_the_old_one(tmp_path: Path, database_url: str) -> None:
    data = tmp_path / "data"
    old, new = "bt_old-admin-token-0123456789abcdef", "bt_new-admin-token-fedcba9876543210"
    with running_api(
        make_settings(data, database_url=database_url, admin_token=old), embedded_loop=False
    ) as api:
        assert api.get("/api/v1/jobs", headers=auth(old)).status_code == 200
        kept = _new(api, auth(old), name="kept")
    with running_api(
        make_settings(data, database_url=database_url, admin_token=new), embedded_loop=False
    ) as api:
        assert api.get("/api/v1/jobs", headers=auth(old)).status_code == 401
        assert api.get("/api/v1/jobs", headers=auth(new)).status_code == 200
        # Tokens the admin made are the admin's to revoke; a rotation keeps them.
        assert api.get("/api/v1/jobs", headers=auth(str(kept["token"]))).status_code == 200
    # Unset, the token file takes over and the env token stops working too.
    with running_api(
        make_settings(data, database_url=database_url, admin_token=None), embedded_loop=False
    ) as api:
        file_token = (data / "admin-token").read_text().strip()
        assert api.get("/api/v1/jobs", headers=auth(new)).status_code == 401
        assert api.get("/api/v1/jobs", headers=auth(file_token)).status_code == 200


def test_migration_marks_the_existing_admin_token_as_bootstrap(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True)
    url = settings.resolved_database_url
    command.upgrade(alembic_config(url), "0002")
    db = Database(url)
    try:
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO users (id, name, created_at) VALUES "
                    "('u1', 'admin', CURRENT_TIMESTAMP), ('u2', 'bob', CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO api_tokens (id, user_id, name, token_hash, created_at) VALUES "
                    f"('t1', 'u1', 'admin', '{hash_token('a')}', CURRENT_TIMESTAMP), "
                    f"('t2', 'u1', 'cli', '{hash_token('b')}', CURRENT_TIMESTAMP), "
                    f"('t3', 'u2', 'admin', '{hash_token('c')}', CURRENT_TIMESTAMP)"
                )
            )
        command.upgrade(alembic_config(url), "head")
        with db.transaction() as session:
            marked = {row.id for row in session.query(ApiToken) if row.bootstrap}
        assert marked == {"t1"}
    finally:
        db.dispose()
