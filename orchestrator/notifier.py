"""Delivers webhook notifications from the events table, never in the engine's way.

`deliver_due_notifications(db, now)` does one pass: it reads the events past its cursor into the
outbox (one row per event and webhook), then POSTs the rows that are due. A failed POST is
retried with backoff; every try is recorded as an event. It is safe to run twice at once: the
cursor moves by compare-and-set and the outbox is unique per (event, webhook). `baton serve`
runs it on its own thread (NotifierLoop); a Celery beat task can call it the same way.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator import webhooks
from orchestrator.db import Database
from orchestrator.models import Event, Job, Notification, NotificationCursor
from orchestrator.transitions import record_event

log = logging.getLogger(__name__)

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
SKIPPED = "skipped"  # another notifier holds this try
# How long a claimed try is held before another notifier may take it (a crash mid-POST).
CLAIM_SECONDS = 120.0
BATCH = 50
POST_TIMEOUT_SECONDS = 10.0

# The one seam to the outside: POST this JSON to this URL, return the HTTP status.
Poster = Callable[[str, dict[str, Any]], int]


def post_json(url: str, body: dict[str, Any]) -> int:
    """POST with the standard library: httpx logs every request's full URL, a secret here."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "baton-notifier"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=POST_TIMEOUT_SECONDS) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@dataclass(frozen=True)
class PassReport:
    enqueued: int
    delivered: int
    retried: int
    failed: int


def deliver_due_notifications(
    db: Database, now: datetime | None = None, post: Poster = post_json
) -> PassReport:
    """One pass: enqueue new notifying events, then try every due outbox row once."""
    now = now or datetime.now(UTC)
    enqueued = enqueue_new_events(db, now)
    delivered = retried = failed = 0
    for row_id in _due(db, now):
        outcome = _deliver_one(db, row_id, now, post)
        delivered += outcome == DELIVERED
        retried += outcome == PENDING
        failed += outcome == FAILED
    return PassReport(enqueued, delivered, retried, failed)


def enqueue_new_events(db: Database, now: datetime) -> int:
    with db.transaction() as session:
        cursor = session.get(NotificationCursor, 1)
        if cursor is None:
            try:
                with session.begin_nested():
                    session.add(NotificationCursor(id=1, last_event_id=0))
            except IntegrityError:
                pass  # another notifier made it first
            cursor = session.get(NotificationCursor, 1)
        assert cursor is not None
        start = cursor.last_event_id
        events = list(
            session.scalars(
                select(Event).where(Event.id > start).order_by(Event.id).limit(BATCH * 4)
            )
        )
        if not events:
            return 0
        count = _outbox_rows(session, events, now)
        moved = session.execute(
            update(NotificationCursor)
            .where(NotificationCursor.id == 1, NotificationCursor.last_event_id == start)
            .values(last_event_id=events[-1].id)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()  # another notifier took these events
            return 0
        return count


def _outbox_rows(session: Session, events: list[Event], now: datetime) -> int:
    count = 0
    specs: dict[str, dict[str, Any]] = {}
    for event in events:
        if not webhooks.notifies(event.kind, event.segment_index, event.from_state, event.to_state):
            continue
        if event.job_id not in specs:
            job = session.get(Job, event.job_id)
            specs[event.job_id] = job.spec if job is not None else {}
        for index, _ in enumerate(webhooks.webhooks_of(specs[event.job_id])):
            session.add(
                Notification(
                    job_id=event.job_id,
                    event_id=event.id,
                    hook_index=index,
                    state=PENDING,
                    attempts=0,
                    next_attempt_at=now,
                )
            )
            count += 1
    return count


def _due(db: Database, now: datetime) -> list[int]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(Notification.id)
                .where(Notification.state == PENDING, Notification.next_attempt_at <= now)
                .order_by(Notification.next_attempt_at, Notification.id)
                .limit(BATCH)
            )
        )


def _deliver_one(db: Database, row_id: int, now: datetime, post: Poster) -> str:
    with db.transaction() as session:
        row = session.get(Notification, row_id)
        event = session.get(Event, row.event_id) if row is not None else None
        job = session.get(Job, row.job_id) if row is not None else None
        if row is None or event is None or job is None or row.state != PENDING:
            return DELIVERED if row is not None and row.state == DELIVERED else FAILED
        urls = webhooks.webhooks_of(job.spec)
        if row.hook_index >= len(urls):
            row.state = FAILED
            return FAILED
        url = urls[row.hook_index]
        body = webhooks.message(
            job.id, job.name, event.kind, event.segment_index, event.to_state, event.message
        )
        attempts = row.attempts
        # Claim the try (compare-and-set), so two notifiers never POST the same row at once.
        claimed = session.execute(
            update(Notification)
            .where(
                Notification.id == row_id,
                Notification.state == PENDING,
                Notification.attempts == attempts,
                Notification.next_attempt_at <= now,
            )
            .values(next_attempt_at=now + timedelta(seconds=CLAIM_SECONDS))
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return SKIPPED
    problem = _post(post, url, body)
    shown = webhooks.redact_url(url)
    with db.transaction() as session:
        row = session.get(Notification, row_id)
        if row is None:
            return FAILED
        session.refresh(row)
        row.attempts = attempts + 1
        if problem is None:
            row.state, row.delivered_at, row.last_error = DELIVERED, now, None
            record_event(
                session, row.job_id, "notification_sent", message=f"{event.kind} to {shown}"
            )
            return DELIVERED
        row.last_error = problem
        if row.attempts >= webhooks.MAX_ATTEMPTS:
            row.state = FAILED
            text = f"{event.kind} to {shown}: gave up after {row.attempts} tries ({problem})"
            record_event(session, row.job_id, "notification_failed", message=text)
            log.warning("webhook %s: %s", shown, text)
            return FAILED
        delay = webhooks.retry_delay(row.attempts)
        row.next_attempt_at = now + timedelta(seconds=delay)
        text = f"{event.kind} to {shown}: {problem}; try {row.attempts + 1} in {delay:g} s"
        record_event(session, row.job_id, "notification_retry", message=text)
        return PENDING


def _post(post: Poster, url: str, body: dict[str, Any]) -> str | None:
    """None if the receiver took it (2xx), else why not, without the URL."""
    try:
        code = post(url, body)
    except urllib.error.URLError as exc:  # refused, unresolvable, TLS: the reason, not the URL
        return f"unreachable ({exc.reason})"[:300]
    except OSError as exc:  # a timeout or a reset mid-response
        return f"unreachable ({type(exc).__name__})"
    return None if 200 <= code < 300 else f"HTTP {code}"


class NotifierLoop:
    """Runs `deliver_due_notifications` every `interval` seconds on its own thread."""

    def __init__(self, db: Database, interval: float, post: Poster = post_json) -> None:
        self.db = db
        self.interval = interval
        self.post = post
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="baton-notifier", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                deliver_due_notifications(self.db, post=self.post)
            except SQLAlchemyError:  # the database away for a moment: the next pass catches up
                log.exception("notification pass failed; retrying next interval")
            self._stop.wait(self.interval)
