"""Webhook notifications against a local HTTP receiver, on a fake clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from orchestrator import notifier
from orchestrator.celery_app import NOTIFY_TASK, make_app
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.notifier import deliver_due_notifications, enqueue_new_events
from tests.factories import ADMIN_TOKEN, job_spec, live_server
from tests.support.webhook_receiver import Receiver

SECRET = "s3cr3t-path-token"
T0 = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def db(settings: Settings, api: TestClient) -> Iterator[Database]:
    database = Database(settings.resolved_database_url)
    yield database
    database.dispose()


def _cancelled_job(api: TestClient, *urls: str, name: str = "hooked") -> str:
    spec = job_spec(name=name, notify={"webhooks": list(urls)})
    job_id: str = api.post("/api/v1/jobs", json=spec).json()["id"]
    assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    return job_id


def _events(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/events").json()
    return events


def test_one_post_per_event_and_webhook_never_twice(
    api: TestClient, db: Database, receiver: Receiver
) -> None:
    receiver.start()
    job_id = _cancelled_job(api, receiver.url(), receiver.url("/second"))
    report = deliver_due_notifications(db, T0)
    assert (report.enqueued, report.delivered) == (2, 2)
    assert sorted(receiver.paths) == [f"/hook/{SECRET}", "/second"]
    body = receiver.received[0]
    assert body["job_id"] == job_id
    assert body["state"] == "cancelled"
    assert body["text"].startswith("Baton job hooked")
    assert "cancelled" in body["text"]
    assert body["content"] == body["text"]  # Discord reads `content`, Slack `text`
    # Later passes find nothing new: no duplicates.
    deliver_due_notifications(db, T0 + timedelta(minutes=5))
    assert len(receiver.received) == 2
    kinds = [event["kind"] for event in _events(api, job_id)]
    assert kinds.count("notification_sent") == 2


def test_a_500_is_retried_with_backoff_and_each_try_is_an_event(
    api: TestClient, db: Database, receiver: Receiver
) -> None:
    receiver.codes.extend([500])
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    assert deliver_due_notifications(db, T0).retried == 1
    # Not due yet: the first retry waits 2 s.
    assert deliver_due_notifications(db, T0 + timedelta(seconds=1)).delivered == 0
    assert deliver_due_notifications(db, T0 + timedelta(seconds=3)).delivered == 1
    assert len(receiver.received) == 2
    assert receiver.received[0] == receiver.received[1]
    events = _events(api, job_id)
    retry = next(event for event in events if event["kind"] == "notification_retry")
    assert "HTTP 500" in retry["message"]
    assert "http://127.0.0.1/…" in retry["message"]
    assert [event["kind"] for event in events].count("notification_sent") == 1


def test_nothing_is_lost_while_the_receiver_is_down(
    api: TestClient, db: Database, receiver: Receiver
) -> None:
    first = _cancelled_job(api, receiver.url(), name="first")
    now = T0
    for _ in range(4):  # refused connections, with the waits growing between tries
        deliver_due_notifications(db, now)
        now += timedelta(seconds=20)
    second = _cancelled_job(api, receiver.url(), name="second")
    deliver_due_notifications(db, now)
    receiver.start()
    deliver_due_notifications(db, now + timedelta(minutes=10))
    assert sorted(body["job_id"] for body in receiver.received) == sorted([first, second])
    retries = [e for e in _events(api, first) if e["kind"] == "notification_retry"]
    assert len(retries) >= 3
    assert all("unreachable" in e["message"] and "refused" in e["message"] for e in retries)


def test_webhook_urls_are_never_returned_or_logged_in_full(
    api: TestClient, db: Database, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.codes.extend([503] * 20)
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    now = T0
    for _ in range(16):  # until it gives up
        deliver_due_notifications(db, now)
        now += timedelta(hours=1)
    seen = [
        api.get(f"/api/v1/jobs/{job_id}").text,
        api.get("/api/v1/jobs").text,
        api.get(f"/api/v1/jobs/{job_id}/events").text,
        caplog.text,
    ]
    assert "notification_failed" in seen[2]
    for text in seen:
        assert SECRET not in text
    assert api.get(f"/api/v1/jobs/{job_id}").json()["spec"]["notify"] == {
        "webhooks": ["http://127.0.0.1/…"]
    }


@pytest.mark.parametrize(
    "urls", [["ftp://example.org/x"], [], ["not a url"] * 1, ["https://h/x"] * 6]
)
def test_bad_notify_blocks_get_422_without_quoting_the_url(
    api: TestClient, urls: list[str]
) -> None:
    response = api.post("/api/v1/jobs", json=job_spec(notify={"webhooks": urls}))
    assert response.status_code == 422
    assert any(
        error["loc"][:3] == ["body", "notify", "webhooks"] for error in response.json()["detail"]
    )
    for url in urls:
        assert url not in response.text


def test_baton_serve_sends_them_from_its_own_thread(settings: Settings, receiver: Receiver) -> None:
    receiver.start()
    fast = settings.model_copy(update={"notify_interval_seconds": 0.1})
    with live_server(fast) as url:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        spec = job_spec(total_steps=5, notify={"webhooks": [receiver.url()]})
        job_id = httpx.post(f"{url}/api/v1/jobs", json=spec, headers=headers).json()["id"]
        deadline = time.monotonic() + 120  # an upper bound for a slow machine
        while not receiver.received:
            assert time.monotonic() < deadline, "no notification arrived"
            time.sleep(0.05)
    assert receiver.received[0]["job_id"] == job_id
    assert receiver.received[0]["state"] == "succeeded"


def test_two_notifiers_at_once_post_each_row_once(api: TestClient, db: Database) -> None:
    posts: list[str] = []
    inner: list[Any] = []

    def post_while_another_pass_runs(url: str, body: dict[str, Any]) -> int:
        posts.append(body["job_id"])
        if not inner:  # a second notifier (another Celery worker) runs mid-POST
            inner.append(deliver_due_notifications(db, T0, post=post_while_another_pass_runs))
        return 200

    job_id = _cancelled_job(api, "http://127.0.0.1:9/hook")
    report = deliver_due_notifications(db, T0, post=post_while_another_pass_runs)
    assert posts == [job_id]
    assert report.delivered == 1
    assert inner[0].delivered == 0


def test_at_scale_beat_sends_a_notifier_pass(tmp_path: Path) -> None:
    conf = make_app(Settings(data_dir=tmp_path, notify_interval_seconds=3)).conf
    entry = conf.beat_schedule["deliver-notifications"]
    assert (entry["task"], entry["schedule"]) == (NOTIFY_TASK, 3)


def test_a_row_listed_by_two_notifiers_is_posted_once(
    api: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbox row claim: a second notifier that listed the row as due before the first one
    claimed it (the two passes began together) reaches the row while the first is posting; its
    claim finds the row taken and it posts nothing."""
    posts: list[str] = []
    job_id = _cancelled_job(api, "http://127.0.0.1:9/hook")
    enqueue_new_events(db, T0)
    listed_before_the_claim = notifier._due(db, T0)
    assert len(listed_before_the_claim) == 1
    inner: list[Any] = []  # the second notifier's pass report, once it has run

    def post_while_the_other_notifier_tries_the_row(url: str, body: dict[str, Any]) -> int:
        posts.append(body["job_id"])
        if len(posts) == 1:  # the first POST: the second notifier reaches the row now
            with monkeypatch.context() as patched:
                patched.setattr(notifier, "_due", lambda db, now: listed_before_the_claim)
                inner.append(
                    deliver_due_notifications(
                        db, T0, post=post_while_the_other_notifier_tries_the_row
                    )
                )
        return 200

    report = deliver_due_notifications(db, T0, post=post_while_the_other_notifier_tries_the_row)
    assert posts == [job_id]
    assert (report.delivered, inner[0].delivered) == (1, 0)
    assert [e["kind"] for e in _events(api, job_id)].count("notification_sent") == 1
