"""The status page's session lives on the server (sign-out revokes it), sign-in cannot be forged
from another site, no request text is reflected, every answer carries security headers, and
failed authentications are throttled per client address."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.security_headers import HEADERS
from orchestrator.auth_throttle import FailureThrottle
from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN, auth, job_spec, make_settings


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(tmp_path / "data", database_url=database_url)


def _sign_in(api: TestClient) -> str:
    """Signs in through the form; returns the page's CSRF token for actions."""
    api.headers.pop("Authorization", None)
    form = re.search(r'name="csrf" value="([0-9a-f]+)"', api.get("/ui/signin").text)
    assert form is not None
    data = {"token": ADMIN_TOKEN, "csrf": form.group(1)}
    assert api.post("/ui/signin", data=data, follow_redirects=False).status_code == 303
    page = re.search(r'name="csrf" value="([0-9a-f]+)"', api.get("/ui").text)
    assert page is not None
    return page.group(1)


def test_a_signed_out_cookie_replayed_gets_the_sign_in_page(api: TestClient) -> None:
    job_id = api.post("/api/v1/jobs", json=job_spec()).json()["id"]
    csrf = _sign_in(api)
    stolen = api.cookies["baton_session"]
    assert api.post("/ui/signout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    api.cookies.clear()
    api.cookies.set("baton_session", stolen)  # a copy taken before signing out
    replay = api.get("/ui", follow_redirects=False)
    assert (replay.status_code, replay.headers["location"]) == (303, "/ui/signin")
    cancel = api.post(
        f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf, "confirm": "yes"}, follow_redirects=False
    )
    assert cancel.status_code == 303
    assert cancel.headers["location"] == "/ui/signin"
    job = api.get(f"/api/v1/jobs/{job_id}", headers=auth()).json()
    assert job["state"] == "queued"


def test_revoking_the_token_ends_its_page_sessions(api: TestClient) -> None:
    created = api.post("/api/v1/tokens", json={"name": "browser"}, headers=auth()).json()
    api.headers.pop("Authorization", None)
    form = re.search(r'name="csrf" value="([0-9a-f]+)"', api.get("/ui/signin").text)
    assert form is not None
    data = {"token": created["token"], "csrf": form.group(1)}
    assert api.post("/ui/signin", data=data, follow_redirects=False).status_code == 303
    assert api.get("/ui", follow_redirects=False).status_code == 200
    assert api.delete(f"/api/v1/tokens/{created['id']}", headers=auth()).status_code == 204
    assert api.get("/ui", follow_redirects=False).status_code == 303


def test_a_sign_in_posted_from_another_site_is_refused(api: TestClient) -> None:
    api.headers.pop("Authorization", None)
    # Another site's form: the browser sends no SameSite=Strict cookie, so no sign-in cookie.
    forged = api.post("/ui/signin", data={"token": ADMIN_TOKEN}, follow_redirects=False)
    assert forged.status_code == 403
    assert "baton_session" not in api.cookies
    guessed = api.post(
        "/ui/signin", data={"token": ADMIN_TOKEN, "csrf": "0" * 64}, follow_redirects=False
    )
    assert guessed.status_code == 403
    assert "baton_session" not in api.cookies


def test_no_error_text_from_the_request_is_shown(api: TestClient) -> None:
    page = api.get("/ui/signin", params={"error": "Your account is locked: call +1 555 0100"})
    assert page.status_code == 200
    assert "call +1 555 0100" not in page.text
    assert "locked" not in page.text


@pytest.mark.parametrize("path", ["/ui/signin", "/ui", "/api/v1/jobs", "/ui/static/baton.css"])
def test_every_answer_has_the_security_headers(api: TestClient, path: str) -> None:
    _sign_in(api)
    answer = api.get(path, headers=auth(), follow_redirects=False)
    for name, value in HEADERS.items():
        assert answer.headers[name] == value
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    if not path.startswith("/ui/static/"):
        assert answer.headers["Cache-Control"] == "no-store"


def test_failed_authentications_are_throttled_with_retry_after(api: TestClient) -> None:
    wrong = {"Authorization": "Bearer bt_wrong-guess"}
    codes = [api.get("/api/v1/jobs", headers=wrong).status_code for _ in range(12)]
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429, 429]
    throttled = api.get("/api/v1/jobs", headers=auth())  # even the right one, from this address
    assert throttled.status_code == 429
    assert int(throttled.headers["Retry-After"]) >= 1


def test_one_address_s_failed_guesses_do_not_lock_out_another(api: TestClient) -> None:
    wrong = {"Authorization": "Bearer bt_wrong-guess"}
    for _ in range(11):
        api.get("/api/v1/jobs", headers=wrong)
    assert api.get("/api/v1/jobs", headers=auth()).status_code == 429
    elsewhere = TestClient(api.app, client=("192.0.2.7", 50000))
    assert elsewhere.get("/api/v1/jobs", headers=auth()).status_code == 200
    # A server on a Unix socket knows no client address: its requests are served too.
    nowhere = TestClient(api.app, client=None, raise_server_exceptions=False)  # type: ignore[arg-type]
    assert nowhere.get("/api/v1/jobs", headers=auth()).status_code == 200


def test_the_throttle_refills_at_its_rate() -> None:
    now = [0.0]
    throttle = FailureThrottle(burst=3, refill_seconds=10.0, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1") is None
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 10
    assert throttle.retry_after("10.0.0.2") is None  # per address
    now[0] = 4.0
    assert throttle.retry_after("10.0.0.1") == 6
    now[0] = 10.0
    assert throttle.retry_after("10.0.0.1") is None
