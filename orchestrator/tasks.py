"""The Celery app (`celery -A orchestrator.tasks`) and its two thin tasks over the engine.

`fan_out` (sent by beat every BATON_BEAT_INTERVAL_SECONDS) lists the jobs due for attention and
sends one `reconcile_jobs` per batch of ids, to the queue that can drive them. `reconcile_jobs`
first puts off, in one statement, the jobs that only wait for a quota refresh (the engine's
`park_waiting`), then has the engine reconcile each other one, re-reading the row under the
job's claim; `reconcile_job` (the API's nudge) does that for one id. Running any of them twice,
late, or on two workers at once is harmless. No task carries state of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import redis
from sqlalchemy import select
from sqlalchemy.exc import OperationalError as DatabaseUnavailable

from orchestrator.celery_app import (
    FAN_OUT_TASK,
    NOTIFY_TASK,
    RECONCILE_BATCH_TASK,
    RECONCILE_TASK,
    DispatchGuard,
    make_app,
    queue_for,
)
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.metrics import RECONCILE_LAG, RECONCILES
from orchestrator.models import Job, utcnow
from orchestrator.notifier import Deliveries, deliver_due_notifications
from orchestrator.service import Services, build_services, build_webhook_client
from orchestrator.transitions import StaleState
from worker.kaggle_access.client import ClientFactory, production_client

log = logging.getLogger(__name__)

settings = Settings()
app = make_app(settings)


@dataclass
class Runtime:
    """What one worker process builds once and shares between its threads."""

    services: Services
    guard: DispatchGuard


_BATCH = 500  # job ids per query and per Redis round trip in a fan-out
# Job ids per reconcile_jobs task: the broker's and Celery's cost is paid once per batch, and
# batches are small enough for every worker thread to get some.
_TASK_BATCH = 50
_runtime: Runtime | None = None
_runtime_lock = threading.Lock()
_kaggle_clients: ClientFactory = production_client


def use_kaggle_clients(factory: ClientFactory) -> None:
    """Before the worker starts: the one seam to Kaggle (tests point it at the emulator)."""
    global _kaggle_clients
    _kaggle_clients = factory


def runtime() -> Runtime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(
                build_services(settings, embedded_loop=False, kaggle_clients=_kaggle_clients),
                DispatchGuard(
                    redis.Redis.from_url(settings.broker_url), settings.dispatch_guard_seconds
                ),
            )
        return _runtime


def job_backends(db: Database, job_ids: list[str]) -> dict[str, str]:
    with db.transaction() as session:
        rows = session.execute(select(Job.id, Job.backend).where(Job.id.in_(job_ids)))
        return {job_id: backend for job_id, backend in rows}


def fan_out() -> int:
    """Send a reconcile for every due job not already dispatched, in batches of ids per queue;
    returns how many jobs were sent."""
    current = runtime()
    now = utcnow()
    due = current.services.engine.due_job_ids(now)
    sent = 0
    for start in range(0, len(due), _BATCH):
        batch = due[start : start + _BATCH]
        backends = job_backends(current.services.db, batch)
        queues: dict[str, list[str]] = {}
        for job_id in current.guard.hold([job_id for job_id in batch if job_id in backends]):
            queues.setdefault(queue_for(backends[job_id], settings.local_host), []).append(job_id)
        for queue, job_ids in queues.items():
            for first in range(0, len(job_ids), _TASK_BATCH):
                chunk = job_ids[first : first + _TASK_BATCH]
                reconcile_jobs_task.apply_async((chunk, now.timestamp()), queue=queue)
                sent += len(chunk)
    current.guard.mark_fan_out(now)
    return sent


def reconcile_lag(db: Database, job_id: str, due_seen_at: float | None) -> float | None:
    """Seconds since the job fell due: its next_attempt_at, or else when beat saw it due."""
    with db.transaction() as session:
        due_at = session.scalar(select(Job.next_attempt_at).where(Job.id == job_id))
    if due_at is not None:
        return max(0.0, (utcnow() - due_at).total_seconds())
    if due_seen_at is not None:
        return max(0.0, time.time() - due_seen_at)
    return None  # a nudge: nothing was late


def reconcile(job_id: str, due_seen_at: float | None, release_guard: bool = True) -> None:
    """Reconcile one job now; `due_seen_at` is when beat's fan-out found it due (for the lag)."""
    current = runtime()
    lag = reconcile_lag(current.services.db, job_id, due_seen_at)
    if lag is not None:
        RECONCILE_LAG.observe(lag)
    try:
        current.services.engine.reconcile_job(job_id)
        RECONCILES.inc()
    except StaleState as exc:
        log.info("job %s moved while reconciling (%s); the next look re-reads it", job_id, exc)
    finally:
        if release_guard:
            try:
                current.guard.release(job_id)
            except redis.RedisError as exc:  # the guard expires by itself
                log.warning("dispatch guard of job %s not released: %s", job_id, exc)


def reconcile_jobs(job_ids: list[str], due_seen_at: float) -> None:
    """A batch from the fan-out: the jobs that only wait put off at once, the others visited."""
    current = runtime()
    try:
        parked = set(current.services.engine.park_waiting(job_ids))
        for _ in parked:
            RECONCILE_LAG.observe(max(0.0, time.time() - due_seen_at))
        RECONCILES.inc(len(parked))
        for job_id in job_ids:
            if job_id not in parked:
                reconcile(job_id, due_seen_at, release_guard=False)
    finally:
        try:
            current.guard.release_all(job_ids)
        except redis.RedisError as exc:  # the guards expire by themselves
            log.warning("dispatch guards of %d jobs not released: %s", len(job_ids), exc)


# The database went away for a moment: look again soon, with backoff and jitter, a few times
# (short countdowns only); after that beat finds the job due on a later tick.
_RETRY_WHEN_THE_DATABASE_BLINKS = {
    "ignore_result": True,
    "autoretry_for": (DatabaseUnavailable,),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 3,
}
fan_out_task = app.task(name=FAN_OUT_TASK, ignore_result=True)(fan_out)
reconcile_job = app.task(name=RECONCILE_TASK, **_RETRY_WHEN_THE_DATABASE_BLINKS)(reconcile)
reconcile_jobs_task = app.task(name=RECONCILE_BATCH_TASK, **_RETRY_WHEN_THE_DATABASE_BLINKS)(
    reconcile_jobs
)


_deliveries: Deliveries | None = None


def notify() -> None:
    """One notifier pass (webhooks); beat sends it every BATON_NOTIFY_INTERVAL_SECONDS to the
    notifications queue, which `baton worker --notifications` serves: never the engine's
    workers. The pass starts the POSTs and returns: they run on this process's threads, under
    one cap for the process (BATON_WEBHOOK_CONCURRENCY, _PER_USER), so a pass never waits on
    a receiver and passes never stack up behind slow ones."""
    global _deliveries
    with _runtime_lock:
        if _deliveries is None:
            _deliveries = Deliveries(settings.webhook_concurrency, settings.webhook_per_user)
    deliver_due_notifications(
        runtime().services.db,
        post=build_webhook_client(settings),
        deliveries=_deliveries,
        wait_seconds=None,
    )


notify_task = app.task(name=NOTIFY_TASK, ignore_result=True)(notify)
