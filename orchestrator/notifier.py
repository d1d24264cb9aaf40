"""Delivers webhook notifications from the events table, never in the engine's way.

`deliver_due_notifications(db, now)` does one pass: it reads the events past its cursor into the
outbox (one row per event and webhook), then POSTs the rows that are due. A failed POST is
retried with backoff; every try is recorded as an event. It is safe to run twice at once: the
cursor moves by compare-and-set and the outbox is unique per (event, webhook). `baton serve`
runs it on its own thread (NotifierLoop); Celery runs it on its own queue (orchestrator/tasks.py).

Each POST runs on its own thread, at most `concurrency` at once and `per_user` per user, each
within the client's total deadline: a slow or hostile receiver costs its owner's budget only.
Whatever one POST raises counts as one failed try of that row.
"""

from __future__ import annotations

import logging
import threading
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
from orchestrator.webhook_client import NotDelivered, WebhookClient

log = logging.getLogger(__name__)

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
SKIPPED = "skipped"  # another notifier holds this try
# How long a claimed try is held before another notifier may take it (a crash mid-POST).
CLAIM_SECONDS = 120.0
BATCH = 50
CONCURRENCY = 16
PER_USER = 4
# What an event says of a failed try: the status if there was one, else nothing more (which of
# refused, reset, not HTTP or not allowed would tell a user what listens on the server's network).
NOT_DELIVERED = "not delivered (no HTTP answer within the deadline)"

# The one seam to the outside: POST this JSON to this URL, return the HTTP status (or raise
# NotDelivered).
Poster = Callable[[str, dict[str, Any]], int]
# Public addresses only, 10 s in all.
post_json: Poster = WebhookClient()


class Deliveries:
    """POSTs in flight, each on its own daemon thread: at most `concurrency`, `per_user` each.

    Daemon threads: a shutdown never waits on a receiver (a cut POST is retried after restart).
    """

    def __init__(self, concurrency: int = CONCURRENCY, per_user: int = PER_USER) -> None:
        self.concurrency = concurrency
        self.per_user = per_user
        self._users: dict[int, str] = {}  # row id -> user id, while in flight
        self._outcomes: list[str] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def busy_users(self) -> set[str]:
        with self._lock:
            counts: dict[str, int] = {}
            for user in self._users.values():
                counts[user] = counts.get(user, 0) + 1
            return {user for user, count in counts.items() if count >= self.per_user}

    def start(self, row_id: int, user_id: str, work: Callable[[], str]) -> bool:
        """Run `work` on a new thread if the caps allow; False if they do not."""
        with self._lock:
            mine = sum(1 for user in self._users.values() if user == user_id)
            if row_id in self._users or len(self._users) >= self.concurrency:
                return False
            if mine >= self.per_user:
                return False
            self._users[row_id] = user_id

        def run() -> None:
            outcome = FAILED
            try:
                outcome = work()
            finally:
                with self._lock:
                    del self._users[row_id]
                    self._outcomes.append(outcome)
                    self._idle.notify_all()

        threading.Thread(target=run, name=f"baton-webhook-{row_id}", daemon=True).start()
        return True

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._users, timeout)

    def take_outcomes(self) -> list[str]:
        with self._lock:
            taken, self._outcomes = self._outcomes, []
            return taken


@dataclass(frozen=True)
class PassReport:
    enqueued: int
    delivered: int
    retried: int
    failed: int


def deliver_due_notifications(
    db: Database,
    now: datetime | None = None,
    post: Poster = post_json,
    deliveries: Deliveries | None = None,
    wait_seconds: float | None = 60.0,
) -> PassReport:
    """One pass: enqueue new notifying events, then start a try of each due outbox row.

    The pass waits up to `wait_seconds` for its tries (Celery, tests); the embedded loop passes
    None and its long-lived `deliveries`, so tries run on past the pass and the report counts
    those that ended meanwhile.
    """
    now = now or datetime.now(UTC)
    enqueued = enqueue_new_events(db, now)
    running = deliveries or Deliveries()
    for row_id, user_id in _due(db, now, running.busy_users()):
        running.start(row_id, user_id, _try_of(db, row_id, now, post))
    if wait_seconds is not None:
        running.wait_idle(wait_seconds)
    outcomes = running.take_outcomes()
    return PassReport(
        enqueued,
        outcomes.count(DELIVERED),
        outcomes.count(PENDING),
        outcomes.count(FAILED),
    )


def _try_of(db: Database, row_id: int, now: datetime, post: Poster) -> Callable[[], str]:
    def work() -> str:
        try:
            return _deliver_one(db, row_id, now, post)
        except SQLAlchemyError:  # the database away for a moment: the claim expires, retried
            log.warning("notification %s: database error; retried later", row_id)
            return SKIPPED

    return work


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


def _due(db: Database, now: datetime, busy_users: set[str]) -> list[tuple[int, str]]:
    """Due rows with their job's user, leaving out users whose budget is spent (so one user's
    backlog cannot hide everyone else's rows past the batch)."""
    query = (
        select(Notification.id, Job.user_id)
        .join(Job, Job.id == Notification.job_id)
        .where(Notification.state == PENDING, Notification.next_attempt_at <= now)
    )
    if busy_users:
        query = query.where(Job.user_id.not_in(busy_users))
    query = query.order_by(Notification.next_attempt_at, Notification.id).limit(BATCH)
    with db.transaction() as session:
        return [(row_id, user_id) for row_id, user_id in session.execute(query)]


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
    """None if the receiver took it (2xx), else why not: the status, or nothing more."""
    try:
        code = post(url, body)
    except NotDelivered:
        return NOT_DELIVERED
    except Exception as exc:
        # The one boundary to an untrusted receiver: whatever the HTTP stack raises is one failed
        # try of this row, never the end of the notifier. Only the class is logged: a traceback
        # would hold the URL, a secret.
        log.warning("webhook POST raised %s; counted as not delivered", type(exc).__name__)
        return NOT_DELIVERED
    return None if 200 <= code < 300 else f"not delivered (HTTP {code})"


class NotifierLoop:
    """Runs `deliver_due_notifications` every `interval` seconds on its own thread; the POSTs
    run beside it (Deliveries), so a pass never waits on a receiver."""

    def __init__(
        self,
        db: Database,
        interval: float,
        post: Poster = post_json,
        deliveries: Deliveries | None = None,
    ) -> None:
        self.db = db
        self.interval = interval
        self.post = post
        self.deliveries = deliveries or Deliveries()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="baton-notifier", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Bounded: POSTs in flight are cut (their rows are retried after the claim expires)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if isinstance(self.post, WebhookClient):
            self.post.abort_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                deliver_due_notifications(
                    self.db, post=self.post, deliveries=self.deliveries, wait_seconds=None
                )
            except SQLAlchemyError:  # the database away for a moment: the next pass catches up
                log.exception("notification pass failed; retrying next interval")
            self._stop.wait(self.interval)
