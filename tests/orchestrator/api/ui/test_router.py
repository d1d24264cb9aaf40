"""The status page without a browser: sign-in cookie, CSRF on actions, and user isolation."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.auth import issue_token
from orchestrator.config import Settings
from orchestrator.db import Database
from tests.factories import ADMIN_TOKEN, job_spec


def _signin_csrf(api: TestClient) -> str:
    """Open the sign-in page (its cookie) and return the form's CSRF token."""
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', api.get("/ui/signin").text)
    assert found is not None
    return found.group(1)


def _post_signin(api: TestClient, token: str) -> Any:
    data = {"token": token, "csrf": _signin_csrf(api)}
    return api.post("/ui/signin", data=data, follow_redirects=False)


def _sign_in(api: TestClient, token: str) -> str:
    """Sign in through the form; returns the page's CSRF token."""
    api.headers.pop("Authorization", None)
    response = _post_signin(api, token)
    assert response.status_code == 303, response.text
    page = api.get("/ui")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found is not None
    return found.group(1)


def _submit(api: TestClient, **overrides: Any) -> str:
    response = api.post(
        "/api/v1/jobs",
        json=job_spec(**overrides),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def _token_for(settings: Settings, name: str) -> str:
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        token = issue_token(session, name)
    db.dispose()
    return token


def test_pages_need_sign_in_and_the_cookie_is_httponly(api: TestClient) -> None:
    api.headers.pop("Authorization")
    assert api.get("/ui", follow_redirects=False).headers["location"] == "/ui/signin"
    assert api.get("/ui/fragments/jobs").status_code == 401
    # A bearer token is not a page session.
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert api.get("/ui", headers=headers, follow_redirects=False).status_code == 303
    wrong = _post_signin(api, "bt_wrong")
    assert wrong.status_code == 401
    assert "not valid" in wrong.text
    response = _post_signin(api, ADMIN_TOKEN)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert ADMIN_TOKEN not in cookie


def test_a_tampered_cookie_signs_nobody_in(api: TestClient) -> None:
    _sign_in(api, ADMIN_TOKEN)
    value = api.cookies["baton_session"]
    api.cookies.clear()
    api.cookies.set("baton_session", value[:-4] + ("AAAA" if value[-4:] != "AAAA" else "BBBB"))
    assert api.get("/ui", follow_redirects=False).status_code == 303


def test_jobs_page_lists_the_users_jobs_with_progress(api: TestClient) -> None:
    job_id = _submit(api, name="visible-job", total_steps=77)
    _sign_in(api, ADMIN_TOKEN)
    page = api.get("/ui").text
    assert "visible-job" in page
    assert 'max="77"' in page
    assert f"/ui/jobs/{job_id}" in page
    assert "visible-job" in api.get("/ui/fragments/jobs").text


def test_actions_need_the_csrf_token_and_a_confirmation_page(api: TestClient) -> None:
    job_id = _submit(api)
    csrf = _sign_in(api, ADMIN_TOKEN)
    confirm = api.get(f"/ui/jobs/{job_id}/confirm/pause")
    assert confirm.status_code == 200
    assert "Yes, pause it" in confirm.text
    assert api.post(f"/ui/jobs/{job_id}/pause").status_code == 403
    assert api.post(f"/ui/jobs/{job_id}/pause", data={"csrf": "0" * 64}).status_code == 403
    assert (
        api.get(
            f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        ).json()["state"]
        == "queued"
    )
    done = api.post(f"/ui/jobs/{job_id}/pause", data={"csrf": csrf}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, f"/ui/jobs/{job_id}")
    assert "paused" in api.get(f"/ui/jobs/{job_id}").text
    # The engine still decides: pausing a paused job is a conflict.
    assert api.post(f"/ui/jobs/{job_id}/pause", data={"csrf": csrf}).status_code == 409


@pytest.mark.parametrize(
    "method_path",
    [
        ("GET", "/ui/jobs/{id}"),
        ("GET", "/ui/jobs/{id}/live"),
        ("GET", "/ui/jobs/{id}/confirm/cancel"),
        ("POST", "/ui/jobs/{id}/cancel"),
        ("GET", "/ui/jobs/{id}/checkpoints/0/files/trainer.pt"),
    ],
)
def test_user_b_gets_404_for_user_a_s_pages_fragments_actions_and_downloads(
    api: TestClient, settings: Settings, method_path: tuple[str, str]
) -> None:
    job_id = _submit(api)
    csrf = _sign_in(api, _token_for(settings, "bob"))
    method, path = method_path
    response = api.request(
        method, path.format(id=job_id), data={"csrf": csrf} if method == "POST" else None
    )
    assert response.status_code == 404
    assert "bob" in api.get("/ui").text
    assert job_id not in api.get("/ui").text
    assert job_id not in api.get("/ui/fragments/jobs").text
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert api.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["state"] == "queued"


def test_api_download_is_404_for_another_user(api: TestClient, settings: Settings) -> None:
    job_id = _submit(api)
    bob = {"Authorization": f"Bearer {_token_for(settings, 'bob')}"}
    assert api.get(f"/api/v1/jobs/{job_id}/checkpoints/0/files/x", headers=bob).status_code == 404


def test_static_htmx_is_served_locally(api: TestClient) -> None:
    response = api.get("/ui/static/htmx.min.js")
    assert response.status_code == 200
    assert "htmx" in response.text[:200]
