"""Webhook notifications against a local HTTP receiver, on a fake clock."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from orchestrator import notifier
from orchestrator.celery_app import NOTIFY_QUEUE, NOTIFY_TASK, make_app
from orchestrator.cli.workers import worker_argv
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.models import Event, Job, User
from orchestrator.notifier import (
    NOT_DELIVERED,
    Deliveries,
    NotifierLoop,
    PassReport,
    deliver_due_notifications,
    enqueue_new_events,
)
from orchestrator.transitions import record_event
from orchestrator.webhook_client import WebhookClient
from orchestrator.webhooks import parse_networks
from tests.factories import ADMIN_TOKEN, job_spec, live_server, make_settings, running_api
from tests.support.hostile_receivers import HostileReceivers
from tests.support.webhook_receiver import Receiver

SECRET = "s3cr3t-path-token"
T0 = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


# The receivers here listen on loopback, which webhooks may reach only when the operator allows it.
LOOPBACK = "127.0.0.0/8"
loopback_client = WebhookClient(parse_networks(LOOPBACK))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", webhook_allowed_networks=LOOPBACK)


def deliver(db: Database, now: datetime) -> PassReport:
    return deliver_due_notifications(db, now, post=loopback_client)


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
    report = deliver(db, T0)
    assert (report.enqueued, report.delivered) == (2, 2)
    assert sorted(receiver.paths) == [f"/hook/{SECRET}", "/second"]
    body = receiver.received[0]
    assert body["job_id"] == job_id
    assert body["state"] == "cancelled"
    assert body["text"].startswith("Baton job hooked")
    assert "cancelled" in body["text"]
    assert body["content"] == body["text"]  # Discord reads `content`, Slack `text`
    # Later passes find nothing new: no duplicates.
    deliver(db, T0 + timedelta(minutes=5))
    assert len(receiver.received) == 2
    kinds = [event["kind"] for event in _events(api, job_id)]
    assert kinds.count("notification_sent") == 2


def test_a_500_is_retried_with_backoff_and_each_try_is_an_event(
    api: TestClient, db: Database, receiver: Receiver
) -> None:
    receiver.codes.extend([500])
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    assert deliver(db, T0).retried == 1
    # Not due yet: the first retry waits 2 s.
    assert deliver(db, T0 + timedelta(seconds=1)).delivered == 0
    assert deliver(db, T0 + timedelta(seconds=3)).delivered == 1
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
        deliver(db, now)
        now += timedelta(seconds=20)
    second = _cancelled_job(api, receiver.url(), name="second")
    deliver(db, now)
    receiver.start()
    deliver(db, now + timedelta(minutes=10))
    assert sorted(body["job_id"] for body in receiver.received) == sorted([first, second])
    retries = [e for e in _events(api, first) if e["kind"] == "notification_retry"]
    assert len(retries) >= 3
    assert all(NOT_DELIVERED in e["message"] for e in retries)


def test_webhook_urls_are_never_returned_or_logged_in_full(
    api: TestClient, db: Database, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.codes.extend([503] * 20)
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    now = T0
    for _ in range(16):  # until it gives up
        deliver(db, now)
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
    # On their own queue, which only a notifications worker serves: never an engine worker.
    assert entry["options"]["queue"] == NOTIFY_QUEUE
    assert conf.task_routes[NOTIFY_TASK] == {"queue": NOTIFY_QUEUE}
    settings = Settings(data_dir=tmp_path)
    assert "--queues=baton.notify" in worker_argv(settings, 2, False, notifications=True)
    for local in (True, False):
        assert NOTIFY_QUEUE not in " ".join(worker_argv(settings, 2, local))


@pytest.mark.parametrize(
    "url",
    [
        "http://h.example/a b",  # a space
        "http://h.example/a\x00b",  # NUL
        "http://h.example/a\r\nX-Injected: 1",  # CRLF
        "http://h.example:port/x",  # a port that is not a number
        "http://h.example:99999/x",  # out of range
        "http://h.example/\ud800",  # a lone surrogate
    ],
)
def test_urls_the_http_stack_cannot_send_get_422_at_submit(api: TestClient, url: str) -> None:
    body = json.dumps(job_spec(notify={"webhooks": [url]}))  # \ud800 escaped, as JSON allows
    response = api.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"][:3] == ["body", "notify", "webhooks"]
    assert "h.example" not in response.text


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5432/x",
        "http://10.0.0.8/x",
        "http://[::1]:6379/x",
        "http://169.254.169.254/latest",
        "http://[::ffff:127.0.0.1]/x",
    ],
)
def test_private_addresses_get_422_without_the_allow_setting(
    tmp_path: Path, database_url: str, url: str
) -> None:
    strict = make_settings(tmp_path / "data", database_url=database_url)
    with running_api(strict, embedded_loop=False) as client:
        response = client.post("/api/v1/jobs", json=job_spec(notify={"webhooks": [url]}))
        public = client.post(
            "/api/v1/jobs", json=job_spec(notify={"webhooks": ["https://93.184.215.14/hook"]})
        )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "notify", "webhooks", 0]
    assert "BATON_WEBHOOK_ALLOWED_NETWORKS" in response.text
    assert public.status_code == 201


def test_a_name_resolving_to_a_private_address_is_not_posted_to(
    db: Database, api: TestClient, receiver: Receiver
) -> None:
    receiver.start()
    job_id = _cancelled_job(api, receiver.url().replace("127.0.0.1", "localhost"))
    report = deliver_due_notifications(db, T0)  # the default client: public addresses only
    assert report.retried == 1
    assert receiver.received == []
    [retry] = [e for e in _events(api, job_id) if e["kind"] == "notification_retry"]
    assert NOT_DELIVERED in retry["message"]


def test_a_redirect_is_not_followed(api: TestClient, db: Database, receiver: Receiver) -> None:
    receiver.codes.append(307)
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    assert deliver(db, T0).retried == 1
    assert len(receiver.received) == 1
    [retry] = [e for e in _events(api, job_id) if e["kind"] == "notification_retry"]
    assert "not delivered (HTTP 307)" in retry["message"]


@pytest.mark.parametrize(
    "error",
    [
        http.client.BadStatusLine("SSH-2.0"),
        http.client.InvalidURL("bad"),
        RuntimeError("an HTTP stack's own bug"),
    ],
)
def test_whatever_one_post_raises_is_one_failed_try_of_that_row(
    api: TestClient, db: Database, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    def post(url: str, body: dict[str, Any]) -> int:
        raise error

    job_id = _cancelled_job(api, "http://127.0.0.1:9/hook/" + SECRET)
    assert deliver_due_notifications(db, T0, post=post).retried == 1
    assert deliver_due_notifications(db, T0 + timedelta(seconds=3), post=post).retried == 1
    retries = [e for e in _events(api, job_id) if e["kind"] == "notification_retry"]
    assert [NOT_DELIVERED in e["message"] for e in retries] == [True, True]
    assert "try 3" in retries[-1]["message"]  # the count moved on
    assert SECRET not in caplog.text


def test_a_slow_receiver_is_cut_at_the_deadline(api: TestClient, db: Database) -> None:
    hostile = HostileReceivers(drip_seconds=1.0)
    try:
        job_id = _cancelled_job(api, hostile.drip_url())
        quick = WebhookClient(parse_networks(LOOPBACK), deadline_seconds=2.0)
        started = time.monotonic()
        report = deliver_due_notifications(db, T0, post=quick)
        took = time.monotonic() - started
    finally:
        hostile.close()
    assert report.retried == 1
    # The answer drips for 40 s; the POST ends near its 2 s deadline, not after the answer.
    assert took < 30, took
    assert any(e["kind"] == "notification_retry" for e in _events(api, job_id))


def test_a_row_listed_by_two_notifiers_is_posted_once(
    api: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbox row claim: a second notifier that listed the row as due before the first one
    claimed it (the two passes began together) reaches the row while the first is posting; its
    claim finds the row taken and it posts nothing."""
    posts: list[str] = []
    job_id = _cancelled_job(api, "http://127.0.0.1:9/hook")
    enqueue_new_events(db, T0)
    listed_before_the_claim = notifier._due(db, T0, set())
    assert len(listed_before_the_claim) == 1
    inner: list[Any] = []  # the second notifier's pass report, once it has run

    def post_while_the_other_notifier_tries_the_row(url: str, body: dict[str, Any]) -> int:
        posts.append(body["job_id"])
        if len(posts) == 1:  # the first POST: the second notifier reaches the row now
            with monkeypatch.context() as patched:
                patched.setattr(
                    notifier, "_due", lambda db, now, busy_users: listed_before_the_claim
                )
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


def test_a_failed_segment_is_posted_and_a_segment_that_succeeds_is_not(
    api: TestClient, db: Database, receiver: Receiver
) -> None:
    """Which events a webhook hears of: the job's own end, and a segment that failed; a segment
    that committed and chained on is no news."""
    receiver.start()
    job_id = _cancelled_job(api, receiver.url())
    with db.transaction() as session:
        for index, state in [(0, "succeeded"), (1, "failed")]:
            record_event(
                session,
                job_id,
                f"segment_{state}",
                segment_index=index,
                from_state="running",
                to_state=state,
                message="trainer exited 1" if state == "failed" else None,
            )
    deliver(db, T0)
    heard = sorted((body["event"], body["text"]) for body in receiver.received)
    assert [event for event, _ in heard] == ["cancelled", "segment_failed"]
    assert heard[1][1] == f"Baton job hooked ({job_id}): segment 1 failed: trainer exited 1"


def test_rows_already_delivered_never_crowd_a_new_event_out_of_the_batch(
    api: TestClient, db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass lists at most BATCH due rows; the delivered ones behind it are never listed again,
    so the next event is posted however many were delivered before."""
    monkeypatch.setattr(notifier, "BATCH", 2)
    receiver.start()
    delivered = [_cancelled_job(api, receiver.url(), name=f"early-{n}") for n in range(2)]
    deliver(db, T0)
    later = _cancelled_job(api, receiver.url(), name="later")
    deliver(db, T0 + timedelta(minutes=10))  # past the delivered rows' claims
    assert sorted(body["job_id"] for body in receiver.received) == sorted([*delivered, later])


class HeldReceiver:
    """A receiver that takes each POST and holds it until the test releases it: what it holds
    is what the notifier has in flight. Held POSTs end only when released, so a pass's tries all
    run at once, whatever the machine's speed."""

    def __init__(self) -> None:
        self.posted: list[str] = []
        self._arrived = threading.Condition()
        self._open = threading.Event()

    def post(self, url: str, body: dict[str, Any]) -> int:
        with self._arrived:
            self.posted.append(url)
            self._arrived.notify_all()
        self._open.wait(HANG_GUARD_SECONDS)
        return 200

    def wait_held(self, count: int) -> None:
        """Until `count` POSTs are held (their rows claimed)."""
        with self._arrived:
            assert self._arrived.wait_for(lambda: len(self.posted) >= count, HANG_GUARD_SECONDS)

    def release(self, deliveries: Deliveries) -> list[str]:
        """Let every held POST answer 200; what was posted since the last release."""
        self._open.set()
        assert deliveries.wait_idle(HANG_GUARD_SECONDS)
        self._open.clear()
        with self._arrived:
            posted, self.posted = self.posted, []
        return posted


HANG_GUARD_SECONDS = 60.0  # only a hung test waits this long


def _hooked_jobs(
    db: Database, hooks: dict[str, int], base: str = "https://hooks.example.com"
) -> None:
    """For each user, in order, a cancelled job with that many webhooks (at most 5 a job, more in
    a second job): each hook's URL names its user and its number."""
    with db.transaction() as session:
        for user in hooks:
            session.add(User(id=user, name=user))
        session.flush()
        for user, count in hooks.items():
            urls = [f"{base}/{user}/{n}" for n in range(count)]
            for start in range(0, count, 5):
                job_id = f"{user}-{start}"
                spec = job_spec(notify={"webhooks": urls[start : start + 5]})
                session.add(
                    Job(
                        id=job_id,
                        user_id=user,
                        name=job_id,
                        backend="local",
                        state="cancelled",
                        spec=spec,
                        total_steps=50,
                        steps_done=0,
                        created_at=T0,
                        updated_at=T0,
                    )
                )
                session.flush()
                record_event(
                    session, job_id, "job_state", from_state="queued", to_state="cancelled", at=T0
                )
                session.flush()


def _users(posted: list[str]) -> dict[str, int]:
    return dict(Counter(url.split("/")[3] for url in posted))


def test_at_most_16_posts_run_at_once_and_4_per_user(sqlite_db: Database) -> None:
    # Five users with five webhooks each on one cancelled job: 25 POSTs to make.
    users = [f"user{n}" for n in range(5)]
    _hooked_jobs(sqlite_db, dict.fromkeys(users, 5))
    receiver, deliveries = HeldReceiver(), Deliveries()

    def deliver_held(now: datetime) -> PassReport:
        return deliver_due_notifications(
            sqlite_db, now, post=receiver.post, deliveries=deliveries, wait_seconds=None
        )

    first = deliver_held(T0)
    assert (first.enqueued, first.delivered) == (25, 0)
    # The first four users' first four hooks: 16 in flight, 4 of each; the fifth user waits.
    assert _users(receiver.release(deliveries)) == dict.fromkeys(users[:4], 4)
    # The next pass counts the 16 delivered meanwhile and starts the nine left, but only four of
    # the fifth user's at once.
    second = deliver_held(T0 + timedelta(seconds=1))
    assert (second.enqueued, second.delivered, second.retried, second.failed) == (0, 16, 0, 0)
    assert _users(receiver.release(deliveries)) == {**dict.fromkeys(users[:4], 1), "user4": 4}
    third = deliver_held(T0 + timedelta(seconds=2))
    assert receiver.release(deliveries) == ["https://hooks.example.com/user4/4"]
    assert deliver_held(T0 + timedelta(seconds=3)).delivered == 1
    assert third.delivered == 8


def test_one_user_s_backlog_never_holds_back_another_user_s_notification(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass lists at most BATCH due rows; a user with 4 POSTs in flight is left out of the
    listing, so their rows behind it never fill the batch while another user's row waits."""
    monkeypatch.setattr(notifier, "BATCH", 2)
    _hooked_jobs(sqlite_db, {"alice": 6, "bob": 1})  # bob's row comes after all of alice's
    receiver, deliveries = HeldReceiver(), Deliveries()
    for second, held in [(0, 2), (1, 4), (2, None)]:
        deliver_due_notifications(
            sqlite_db,
            T0 + timedelta(seconds=second),
            post=receiver.post,
            deliveries=deliveries,
            wait_seconds=None,
        )
        if held is not None:
            receiver.wait_held(held)
    # Two of alice's per pass until she has 4 in flight; the third pass lists bob's.
    assert _users(receiver.release(deliveries)) == {"alice": 4, "bob": 1}


# The embedded loop (`baton serve`'s NotifierLoop), on SQLite in-process. It reads the wall clock
# itself, so these tests wait on what it does (a POST arriving, a pass ending), never on time.
LOOP_INTERVAL = 0.01


class WatchedLoop(NotifierLoop):
    """The loop, with `ended` set when its thread ends: only stop() may end it."""

    def __init__(self, db: Database, post: Any, deliveries: Deliveries) -> None:
        super().__init__(db, LOOP_INTERVAL, post=post, deliveries=deliveries)
        self.ended = threading.Event()

    def _run(self) -> None:
        try:
            super()._run()
        finally:
            self.ended.set()


class LoopWatcher:
    """Waits on what the loop does, failing at once if its thread has ended (a loop that died
    does nothing more), else after the hang guard."""

    loop: WatchedLoop | None = None

    def _until(self, changed: threading.Condition, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        with changed:
            while not done():
                assert self.loop is None or not self.loop.ended.is_set(), f"loop ended: {what}"
                assert time.monotonic() < deadline, f"hung waiting for {what}"
                changed.wait(0.1)


class CountedPasses(Deliveries, LoopWatcher):
    """The loop's Deliveries, counting its passes: each pass takes the outcomes once, last."""

    def __init__(self) -> None:
        super().__init__()
        self.passes = 0
        self._passed = threading.Condition()

    def take_outcomes(self) -> list[str]:
        taken = super().take_outcomes()
        with self._passed:
            self.passes += 1
            self._passed.notify_all()
        return taken

    def wait_passes(self, more: int) -> None:
        """Until `more` passes have ended after this call."""
        target = self.passes + more
        self._until(self._passed, lambda: self.passes >= target, f"{more} passes")


class ScriptedReceiver(LoopWatcher):
    """Records each POST; answers a URL's scripted codes first, then 200; holds every POST while
    `hold` is set, until `open()`."""

    def __init__(self, codes: dict[str, list[int]] | None = None, hold: bool = False) -> None:
        self.posted: list[str] = []
        self.codes = codes or {}
        self._arrived = threading.Condition()
        self._open = threading.Event()
        if not hold:
            self._open.set()

    def post(self, url: str, body: dict[str, Any]) -> int:
        with self._arrived:
            self.posted.append(url)
            self._arrived.notify_all()
        assert self._open.wait(HANG_GUARD_SECONDS)
        scripted = self.codes.get(url, [])
        return scripted.pop(0) if scripted else 200

    def wait_posted(self, count: int) -> None:
        self._until(self._arrived, lambda: len(self.posted) >= count, f"{count} POSTs")

    def open(self) -> None:
        self._open.set()


def _kinds(db: Database, job_id: str) -> list[str]:
    with db.transaction() as session:
        query = select(Event.kind).where(Event.job_id == job_id).order_by(Event.id)
        return [kind for kind in session.scalars(query) if kind.startswith("notification")]


@pytest.fixture
def loops() -> Iterator[list[NotifierLoop]]:
    """Loops a test starts, stopped at its end however it ends."""
    started: list[NotifierLoop] = []
    yield started
    for loop in started:
        loop.stop()


def _start_loop(
    loops: list[NotifierLoop],
    db: Database,
    post: Any,
    passes: CountedPasses,
    receiver: ScriptedReceiver | None = None,
) -> None:
    loop = WatchedLoop(db, post, passes)
    passes.loop = loop
    if receiver is not None:
        receiver.loop = loop
    loops.append(loop)
    loop.start()


def test_the_loop_posts_each_event_once_and_a_later_event_at_a_later_pass(
    sqlite_db: Database, loops: list[NotifierLoop]
) -> None:
    _hooked_jobs(sqlite_db, {"alice": 2})
    receiver, passes = ScriptedReceiver(), CountedPasses()
    _start_loop(loops, sqlite_db, receiver.post, passes, receiver)
    receiver.wait_posted(2)
    passes.wait_passes(3)  # passes after the POSTs ended find nothing new
    _hooked_jobs(sqlite_db, {"bob": 1})  # an event while the loop runs
    receiver.wait_posted(3)
    passes.wait_passes(3)
    loops.pop().stop()
    assert Counter(receiver.posted) == {
        "https://hooks.example.com/alice/0": 1,
        "https://hooks.example.com/alice/1": 1,
        "https://hooks.example.com/bob/0": 1,
    }
    assert _kinds(sqlite_db, "alice-0") == ["notification_sent"] * 2
    assert _kinds(sqlite_db, "bob-0") == ["notification_sent"]


def test_the_loop_holds_the_caps_across_passes_and_never_waits_on_a_receiver(
    sqlite_db: Database, loops: list[NotifierLoop]
) -> None:
    _hooked_jobs(sqlite_db, {"alice": 6})
    receiver, passes = ScriptedReceiver(hold=True), CountedPasses()
    _start_loop(loops, sqlite_db, receiver.post, passes, receiver)
    receiver.wait_posted(4)
    # Passes go on while alice's four POSTs hang, and start none of her two left: the per-user
    # cap spans the loop's passes, not one pass.
    passes.wait_passes(3)
    assert _users(receiver.posted) == {"alice": 4}
    _hooked_jobs(sqlite_db, {"bob": 1})
    receiver.wait_posted(5)  # another user's event is posted while alice's still hang
    assert _users(receiver.posted) == {"alice": 4, "bob": 1}
    receiver.open()
    receiver.wait_posted(7)
    passes.wait_passes(3)
    assert Counter(receiver.posted) == {
        **{f"https://hooks.example.com/alice/{n}": 1 for n in range(6)},
        "https://hooks.example.com/bob/0": 1,
    }


def test_the_loop_retries_a_failed_post_at_a_later_pass_until_it_is_taken(
    sqlite_db: Database, loops: list[NotifierLoop]
) -> None:
    failing = "https://hooks.example.com/alice/0"
    _hooked_jobs(sqlite_db, {"alice": 1, "bob": 1})
    receiver, passes = ScriptedReceiver(codes={failing: [500]}), CountedPasses()
    _start_loop(loops, sqlite_db, receiver.post, passes, receiver)
    receiver.wait_posted(3)  # the 500, bob's, and alice's retry (webhooks.retry_delay: 2 s on)
    passes.wait_passes(3)
    assert Counter(receiver.posted) == {failing: 2, "https://hooks.example.com/bob/0": 1}
    assert _kinds(sqlite_db, "alice-0") == ["notification_retry", "notification_sent"]
    assert _kinds(sqlite_db, "bob-0") == ["notification_sent"]


class DatabaseAwayOnce(Database):
    """The database away for the loop's first transaction (a restart, a lost connection)."""

    away = True

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        if self.away:
            self.away = False
            raise OperationalError("BEGIN", {}, Exception("server closed the connection"))
        with super().transaction() as session:
            yield session


def test_a_pass_the_database_fails_is_followed_by_one_that_delivers(
    sqlite_db: Database, loops: list[NotifierLoop]
) -> None:
    _hooked_jobs(sqlite_db, {"alice": 1})
    flaky = DatabaseAwayOnce(str(sqlite_db.engine.url))
    receiver, passes = ScriptedReceiver(), CountedPasses()
    try:
        _start_loop(loops, flaky, receiver.post, passes, receiver)
        receiver.wait_posted(1)
        passes.wait_passes(2)
    finally:
        loops.pop().stop()
        flaky.dispose()
    assert receiver.posted == ["https://hooks.example.com/alice/0"]


def test_stop_cuts_a_post_in_flight_and_its_row_is_retried_later(
    sqlite_db: Database, loops: list[NotifierLoop]
) -> None:
    """A receiver that takes the request and never answers, and a client whose own deadline is
    an hour: only stop() ends that POST."""
    listener = socket.create_server(("127.0.0.1", 0))
    requested = threading.Event()
    held: list[socket.socket] = []

    def take_and_hold() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        conn.recv(65536)
        requested.set()

    threading.Thread(target=take_and_hold, daemon=True).start()
    _hooked_jobs(sqlite_db, {"alice": 1}, base=f"http://127.0.0.1:{listener.getsockname()[1]}")
    client = WebhookClient(parse_networks(LOOPBACK), deadline_seconds=3600.0)
    passes = CountedPasses()
    try:
        _start_loop(loops, sqlite_db, client, passes)
        assert requested.wait(HANG_GUARD_SECONDS)
        loops.pop().stop()
        assert passes.wait_idle(HANG_GUARD_SECONDS)  # the hour-long POST was cut
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert _kinds(sqlite_db, "alice-0") == ["notification_retry"]
