"""The Kaggle credentials API: store, show, forget; auth, validation, ownership; no key out."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.auth import get_or_create_user, issue_token
from orchestrator.config import Settings
from orchestrator.credentials import KaggleCredentials, load_kaggle_credentials
from orchestrator.db import Database
from orchestrator.service import build_secret_box
from tests.factories import auth

URL = "/api/v1/credentials/kaggle"
KAGGLE_KEY = "f00dfeedc0ffee0123456789abcdef42"


def _token(settings: Settings, name: str) -> str:
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        token = issue_token(session, name)
    db.dispose()
    return token


def _stored(settings: Settings, user_name: str) -> KaggleCredentials | None:
    """What the engine would load for this user: the database, opened with the service's keys."""
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        user_id = get_or_create_user(session, user_name).id
        loaded = load_kaggle_credentials(session, build_secret_box(settings), user_id)
    db.dispose()
    return loaded


def _put(api: TestClient, username: str = "alice-k", **headers: str) -> dict[str, Any]:
    response = api.put(URL, json={"username": username, "key": KAGGLE_KEY}, headers=headers)
    assert response.status_code == 200, response.text
    assert KAGGLE_KEY not in response.text
    body: dict[str, Any] = response.json()
    return body


def test_put_stores_and_get_shows_everything_but_the_key(
    api: TestClient, settings: Settings
) -> None:
    stored = _put(api)
    assert set(stored) == {"username", "configured", "updated_at"}
    assert (stored["username"], stored["configured"]) == ("alice-k", True)
    assert stored["updated_at"].endswith(("Z", "+00:00"))

    shown = api.get(URL)
    assert shown.status_code == 200
    assert shown.json() == stored
    assert KAGGLE_KEY not in shown.text
    assert _stored(settings, "admin") == KaggleCredentials("alice-k", KAGGLE_KEY)


def test_put_again_replaces(api: TestClient, settings: Settings) -> None:
    first = _put(api, "old-name")
    api.put(URL, json={"username": "new-name", "key": "another-key"})
    shown = api.get(URL).json()
    assert shown["username"] == "new-name"
    assert shown["updated_at"] >= first["updated_at"]
    assert _stored(settings, "admin") == KaggleCredentials("new-name", "another-key")


def test_delete_forgets_then_404(api: TestClient, settings: Settings) -> None:
    _put(api)
    response = api.delete(URL)
    assert response.status_code == 204
    assert response.content == b""
    assert api.get(URL).status_code == 404
    assert api.delete(URL).status_code == 404
    assert _stored(settings, "admin") is None


def test_get_without_credentials_is_404(api: TestClient) -> None:
    response = api.get(URL)
    assert response.status_code == 404
    assert response.json() == {"detail": "no Kaggle credentials stored"}


@pytest.mark.parametrize("headers", [{}, auth("bt_wrong"), {"Authorization": "Basic eDp5"}])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_missing_or_wrong_token_gets_401(
    api: TestClient, headers: dict[str, str], method: str
) -> None:
    _put(api)
    api.headers.pop("Authorization")
    body = {"username": "mallory", "key": "x"} if method == "PUT" else None
    response = api.request(method, URL, json=body, headers=headers)
    assert response.status_code == 401
    assert KAGGLE_KEY not in response.text
    assert api.get(URL, headers=auth()).json()["username"] == "alice-k"


BAD_BODIES = [
    ("username with a space", {"username": "alice k", "key": KAGGLE_KEY}, "username"),
    ("username too long", {"username": "a" * 65, "key": KAGGLE_KEY}, "username"),
    ("empty username", {"username": "", "key": KAGGLE_KEY}, "username"),
    ("missing username", {"key": KAGGLE_KEY}, "username"),
    ("missing key", {"username": "alice-k"}, "key"),
    ("empty key", {"username": "alice-k", "key": ""}, "key"),
    ("key too long", {"username": "alice-k", "key": KAGGLE_KEY * 9}, "key"),
    ("key with a newline", {"username": "alice-k", "key": KAGGLE_KEY + "\n"}, "key"),
    ("key not a string", {"username": "alice-k", "key": 12345}, "key"),
    ("unknown field", {"username": "alice-k", "key": KAGGLE_KEY, "secret": KAGGLE_KEY}, "secret"),
]


@pytest.mark.parametrize(("case", "body", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_input_gets_422_naming_the_field_and_never_echoing_the_key(
    api: TestClient, settings: Settings, case: str, body: dict[str, Any], field: str
) -> None:
    response = api.put(URL, json=body)
    assert response.status_code == 422
    assert ["body", field] in [error["loc"] for error in response.json()["detail"]]
    assert KAGGLE_KEY not in response.text
    assert _stored(settings, "admin") is None


def test_malformed_json_gets_422_without_the_body(api: TestClient) -> None:
    response = api.put(
        URL,
        content=b'{"username": "a", "key": "' + KAGGLE_KEY.encode() + b'"',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert KAGGLE_KEY not in response.text


def test_other_routes_quote_a_short_excerpt_of_the_input(api: TestClient) -> None:
    response = api.post("/api/v1/jobs", json={"name": "x" * 1000})
    assert response.status_code == 422
    name_error = next(e for e in response.json()["detail"] if e["loc"] == ["body", "name"])
    assert name_error["input"].startswith("xxx")
    assert len(name_error["input"]) < 50


def test_a_user_never_sees_or_touches_another_users_credentials(
    api: TestClient, settings: Settings
) -> None:
    _put(api, "admin-k")
    bob = auth(_token(settings, "bob"))
    assert api.get(URL, headers=bob).status_code == 404
    assert api.delete(URL, headers=bob).status_code == 404

    _put(api, "bob-k", **bob)
    assert api.get(URL, headers=bob).json()["username"] == "bob-k"
    assert api.get(URL).json()["username"] == "admin-k"
    assert api.delete(URL, headers=bob).status_code == 204
    assert api.get(URL).json()["username"] == "admin-k"
    assert _stored(settings, "admin") == KaggleCredentials("admin-k", KAGGLE_KEY)
