"""What an API client is told when its token is refused (orchestrator/api/deps.py): the body
names what is wrong, and a throttled client learns how long to wait, in the body the CLI prints
as in the header a script reads."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from orchestrator.auth_throttle import BURST
from tests.factories import job_spec


def test_a_refused_token_is_named_as_what_is_wrong(api: TestClient) -> None:
    api.headers.pop("Authorization")
    for headers in [{}, {"Authorization": "Bearer bt_wrong-guess"}]:
        response = api.post("/api/v1/jobs", headers=headers, json=job_spec())
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert response.json() == {"detail": "missing, invalid, expired or revoked API token"}


def test_a_throttled_client_is_told_why_and_the_same_wait_as_retry_after(
    api: TestClient,
) -> None:
    api.headers.pop("Authorization")
    wrong = {"Authorization": "Bearer bt_wrong-guess"}
    codes = [api.get("/api/v1/jobs", headers=wrong).status_code for _ in range(BURST)]
    assert codes == [401] * BURST
    response = api.get("/api/v1/jobs", headers=wrong)
    assert response.status_code == 429
    wait = response.headers["Retry-After"]
    assert re.fullmatch(r"[1-9][0-9]*", wait)
    # `baton` prints the body ("the server answered 429: ..."): the cause, and the header's wait.
    assert response.json() == {
        "detail": f"too many failed authentications from this address; retry in {wait} s"
    }
