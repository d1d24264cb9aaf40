"""The jobs API without running anything: validation, auth, ownership, actions, listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.routes.jobs import ENDED_HEADER
from orchestrator.auth import issue_token
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.models import Segment
from tests.factories import auth, event_kinds, job_spec, kaggle_spec, make_settings, running_api
from worker.boundary.paths import LOG_FILE


def _submit(api: TestClient, **overrides: Any) -> dict[str, Any]:
    response = api.post("/api/v1/jobs", json=job_spec(**overrides))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_submit_returns_the_stored_job(api: TestClient) -> None:
    job = _submit(api)
    assert job["state"] == "queued"
    assert (job["steps_done"], job["total_steps"]) == (0, 50)
    assert job["created_at"].endswith(("Z", "+00:00"))
    read = api.get(f"/api/v1/jobs/{job['id']}")
    assert read.json() == job
    assert read.headers["content-type"] == "application/json"
    assert [item["id"] for item in api.get("/api/v1/jobs").json()["items"]] == [job["id"]]


def _without(key: str) -> dict[str, Any]:
    spec = job_spec()
    del spec[key]
    return spec


BAD_SPECS = [
    ("missing total_steps", _without("total_steps"), ["body", "total_steps"]),
    ("negative steps", job_spec(total_steps=-5), ["body", "total_steps"]),
    ("unknown backend", job_spec(backend="lsf"), ["body", "backend"]),
    ("unknown trainer module", job_spec(trainer="nope.nothing:X"), ["body", "trainer"]),
    ("unknown trainer class", job_spec(trainer="tests.support.trainers:Nope"), ["body", "trainer"]),
    ("malformed trainer", job_spec(trainer="os.system('x')"), ["body", "trainer"]),
    (
        "limit below the floor",
        job_spec(session={"limit_seconds": 1}),
        ["body", "session", "limit_seconds"],
    ),
    ("oversized name", job_spec(name="n" * 500), ["body", "name"]),
    ("oversized config", job_spec(config={"blob": "x" * 100_000}), ["body", "config"]),
    ("unknown field", {**job_spec(), "gpus": 8}, ["body", "gpus"]),
    (
        "negative retries",
        job_spec(retry={"max_failures": -1}),
        ["body", "retry", "max_failures"],
    ),
]


@pytest.mark.parametrize(("case", "spec", "loc"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_specs_get_422_naming_the_field(
    api: TestClient, case: str, spec: dict[str, Any], loc: list[str]
) -> None:
    response = api.post("/api/v1/jobs", json=spec)
    assert response.status_code == 422
    assert loc in [error["loc"] for error in response.json()["detail"]]
    assert api.get("/api/v1/jobs").json()["total"] == 0


def test_malformed_json_gets_422(api: TestClient) -> None:
    response = api.post(
        "/api/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422


@pytest.mark.parametrize("headers", [{}, auth("bt_wrong"), {"Authorization": "Basic eDp5"}])
def test_missing_or_wrong_token_gets_401(api: TestClient, headers: dict[str, str]) -> None:
    api.headers.pop("Authorization")
    for method, path in [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/x"),
    ]:
        response = api.request(method, path, headers=headers, json=job_spec())
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"


def _add_segment(settings: Settings, job_id: str, index: int, **fields: Any) -> str:
    """A segment row of `job_id` with a launch and a handle; its handle."""
    handle = f"{job_id}-{index:04d}"
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        session.add(
            Segment(
                job_id=job_id,
                index=index,
                launch_id=handle,
                handle=handle,
                limit_seconds=60,
                launch_spec={},
                **fields,
            )
        )
    db.dispose()
    return handle


def _add_finished_segment(settings: Settings, job_id: str) -> None:
    """Segment 0 as a finished local session leaves it: a row with a handle, a log and a checkpoint
    manifest, so every segment-level route has something to hand out (or to refuse)."""
    root = settings.sessions_dir / f"{job_id}-0000"
    root.mkdir(parents=True)
    (root / LOG_FILE).write_text("step 10/50 loss=0.5\nalice's session log\n")
    _add_segment(
        settings,
        job_id,
        0,
        state="succeeded",
        start_step=0,
        end_step=10,
        outcome="deadline",
        metrics=[{"step": 10, "loss": 0.5}],
    )


def test_users_see_only_their_own_jobs(api: TestClient, settings: Settings) -> None:
    job = _submit(api)
    _add_finished_segment(settings, job["id"])
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        bob = issue_token(session, "bob")
    db.dispose()
    as_bob = auth(bob)
    readable = ["", "/segments", "/segments/0/log", "/events", "/metrics", "/checkpoints"]
    # The owner reads every route, so each 404 below is the ownership check, not missing data.
    for path in readable:
        assert api.get(f"/api/v1/jobs/{job['id']}{path}").status_code == 200, path
    assert "alice's session log" in api.get(f"/api/v1/jobs/{job['id']}/segments/0/log").text
    listing = {"items": [], "total": 0, "next_cursor": None}
    assert api.get("/api/v1/jobs", headers=as_bob).json() == listing
    for path in readable:
        response = api.get(f"/api/v1/jobs/{job['id']}{path}", headers=as_bob)
        assert response.status_code == 404, path
        assert "alice" not in response.text
    for action in ["cancel", "pause", "resume"]:
        response = api.post(f"/api/v1/jobs/{job['id']}/{action}", headers=as_bob)
        assert response.status_code == 404, action
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "queued"


def test_unknown_job_gets_404(api: TestClient) -> None:
    for path in ["", "/segments", "/segments/0/log", "/events", "/metrics", "/checkpoints"]:
        assert api.get(f"/api/v1/jobs/jnope{path}").status_code == 404
    for action in ["cancel", "pause", "resume"]:
        assert api.post(f"/api/v1/jobs/jnope/{action}").status_code == 404


def test_actions_follow_the_lifecycle_and_conflicts_get_409(api: TestClient) -> None:
    job_id = _submit(api)["id"]

    def act(action: str) -> int:
        return api.post(f"/api/v1/jobs/{job_id}/{action}").status_code

    assert act("resume") == 409  # queued: nothing to resume
    assert act("pause") == 200
    assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "paused"
    assert act("pause") == 409
    assert act("resume") == 200
    assert act("cancel") == 200
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "cancelled"
    assert job["finished_at"] is not None
    assert (act("cancel"), act("pause"), act("resume")) == (409, 409, 409)
    kinds = event_kinds(api, job_id)
    assert kinds == ["submitted", "paused", "resumed", "cancelled"]


def test_list_filters_and_pages(api: TestClient) -> None:
    ids = [_submit(api, name=f"job-{n}")["id"] for n in range(3)]
    api.post(f"/api/v1/jobs/{ids[0]}/cancel")
    assert api.get("/api/v1/jobs?state=cancelled").json()["total"] == 1
    page = api.get("/api/v1/jobs?limit=2&offset=0").json()
    assert (len(page["items"]), page["total"]) == (2, 3)
    assert api.get("/api/v1/jobs?state=bogus").status_code == 422
    assert api.get("/api/v1/jobs?limit=0").status_code == 422


def test_health_and_openapi(api: TestClient) -> None:
    health = api.get("/healthz").json()
    assert (health["status"], health["database"]) == ("ok", "sqlite")
    paths = api.get("/openapi.json").json()["paths"]
    assert "/api/v1/jobs/{job_id}/segments" in paths


def test_kaggle_job_without_credentials_gets_422_on_backend(api: TestClient) -> None:
    response = api.post("/api/v1/jobs", json=job_spec(backend="kaggle"))
    assert response.status_code == 422
    assert ["body", "backend"] in [error["loc"] for error in response.json()["detail"]]


def test_p100_request_is_accepted_with_a_warning(api: TestClient) -> None:
    api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
    job = _submit(api, backend="kaggle", kaggle={"accelerator": "p100"})
    assert any("P100 was retired" in warning for warning in job["warnings"])
    events = api.get(f"/api/v1/jobs/{job['id']}/events").json()
    assert [e["kind"] for e in events] == ["submitted", "warning"]


def test_the_list_pages_by_cursor_newest_first_without_gaps_or_repeats(api: TestClient) -> None:
    ids = [_submit(api, name=f"job-{n}")["id"] for n in range(5)]
    seen: list[str] = []
    page = api.get("/api/v1/jobs?limit=2").json()
    while True:
        seen += [item["id"] for item in page["items"]]
        assert page["total"] == 5
        if page["next_cursor"] is None:
            break
        page = api.get("/api/v1/jobs", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert seen == ids[::-1]
    # The list shows no spec; GET job does.
    assert "spec" not in page["items"][0]
    assert "spec" in api.get(f"/api/v1/jobs/{ids[0]}").json()


def test_a_state_filtered_list_pages_by_cursor_through_that_state_only(api: TestClient) -> None:
    ids = [_submit(api, name=f"job-{n}")["id"] for n in range(5)]
    cancelled = ids[0], ids[2], ids[3]
    for job_id in cancelled:
        api.post(f"/api/v1/jobs/{job_id}/cancel")
    first = api.get("/api/v1/jobs", params={"state": "cancelled", "limit": 2}).json()
    after = {"state": "cancelled", "limit": 2, "cursor": first["next_cursor"]}
    second = api.get("/api/v1/jobs", params=after).json()
    assert [item["id"] for item in first["items"] + second["items"]] == list(cancelled[::-1])
    assert (first["total"], second["total"], second["next_cursor"]) == (3, 3, None)
    assert {item["state"] for item in first["items"] + second["items"]} == {"cancelled"}


def test_a_cursor_is_a_job_id_of_ones_own(api: TestClient, settings: Settings) -> None:
    mine = _submit(api)["id"]
    for bad in ("not a job id", "j\x00", "x" * 65):
        response = api.get("/api/v1/jobs", params={"cursor": bad})
        assert response.status_code == 422, bad
        assert ["query", "cursor"] in [error["loc"] for error in response.json()["detail"]]
    # Another user's job, or none: an empty page, as if the list ended there.
    store = Database(settings.resolved_database_url)
    with store.transaction() as session:
        bob = issue_token(session, "bob", "laptop")
    store.dispose()
    for cursor, headers in ((mine, auth(bob)), ("j000000000000", auth())):
        page = api.get("/api/v1/jobs", params={"cursor": cursor}, headers=headers).json()
        assert (page["items"], page["next_cursor"]) == ([], None)


@pytest.mark.parametrize("allowed", [False, True], ids=["not-allowed", "allowed"])
def test_a_kaggle_job_continues_locally_only_where_the_operator_allows_it(
    tmp_path: Path, allowed: bool
) -> None:
    """`kaggle.on_quota_exhausted: local` would run the job on this machine: without
    BATON_ALLOW_LOCAL_FALLBACK it is a 422 at that field that names the setting. Waiting for the
    refresh needs no one's leave."""
    settings = make_settings(tmp_path / "data", allow_local_fallback=allowed)
    with running_api(settings, embedded_loop=False) as api:
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        local = api.post("/api/v1/jobs", json=kaggle_spec({"on_quota_exhausted": "local"}))
        if allowed:
            assert local.status_code == 201, local.text
        else:
            assert local.status_code == 422
            [error] = local.json()["detail"]
            assert _what_the_user_reads(error) == {
                "type": "value_error",
                "loc": ["body", "kaggle", "on_quota_exhausted"],
                "msg": "this server does not run Kaggle jobs locally when their quota runs out "
                "(the operator may allow it: BATON_ALLOW_LOCAL_FALLBACK=true)",
            }
        waits = api.post("/api/v1/jobs", json=kaggle_spec({"on_quota_exhausted": "wait"}))
        assert waits.status_code == 201, waits.text
        listed = {job["id"] for job in api.get("/api/v1/jobs").json()["items"]}
    assert len(listed) == (2 if allowed else 1)


def _what_the_user_reads(error: dict[str, Any]) -> dict[str, Any]:
    """What a 422 tells the user of each error: its type, the field and the message."""
    return {key: error[key] for key in ("type", "loc", "msg")}


@pytest.mark.parametrize("allowed_networks", ["", "10.0.0.0/8"], ids=["public-only", "allowed"])
def test_a_webhook_at_a_private_address_is_refused_at_submit_unless_its_network_is_allowed(
    tmp_path: Path, allowed_networks: str
) -> None:
    """A webhook written as a literal private address is a 422 naming the webhook, unless the
    operator allows its network; a public address and a host name pass (a name is checked when
    it is resolved, at each delivery)."""
    settings = make_settings(tmp_path / "data", webhook_allowed_networks=allowed_networks)
    hooks = ["https://93.184.216.34/hook", "https://hooks.example.com/x", "http://10.1.2.3/hook"]
    with running_api(settings, embedded_loop=False) as api:
        response = api.post("/api/v1/jobs", json=job_spec(notify={"webhooks": hooks}))
        if allowed_networks:
            assert response.status_code == 201, response.text
        else:
            assert response.status_code == 422
            [error] = response.json()["detail"]
            assert _what_the_user_reads(error) == {
                "type": "value_error",
                "loc": ["body", "notify", "webhooks", 2],
                "msg": "webhooks may point at public addresses only "
                "(the operator may allow networks: BATON_WEBHOOK_ALLOWED_NETWORKS)",
            }
        public = api.post("/api/v1/jobs", json=job_spec(notify={"webhooks": hooks[:2]}))
        assert public.status_code == 201, public.text


def test_a_segment_log_says_whether_more_will_come_and_a_missing_one_is_a_404_saying_why(
    api: TestClient, settings: Settings
) -> None:
    job_id = _submit(api)["id"]
    logs = f"/api/v1/jobs/{job_id}/segments"
    missing = api.get(f"{logs}/0/log")
    assert missing.status_code == 404
    assert "segment 0 has no session" in missing.json()["detail"]

    _add_finished_segment(settings, job_id)
    ended = api.get(f"{logs}/0/log")
    assert (ended.status_code, ended.headers[ENDED_HEADER]) == (200, "true")

    # Segment 1's session runs but has written no log yet; then its first line.
    handle = _add_segment(settings, job_id, 1, state="running", start_step=10)
    not_yet = api.get(f"{logs}/1/log")
    assert not_yet.status_code == 404
    assert "segment 1 has no log here yet" in not_yet.json()["detail"]
    (settings.sessions_dir / handle).mkdir(parents=True)
    (settings.sessions_dir / handle / LOG_FILE).write_text("step 11/50\n")
    running = api.get(f"{logs}/1/log", params={"offset": 0})
    assert (running.status_code, running.headers[ENDED_HEADER]) == (200, "false")
    assert running.text == "step 11/50\n"
