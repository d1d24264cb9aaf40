"""The Celery app (`celery -A orchestrator.tasks`) and its two thin tasks over the engine.

`fan_out` (sent by beat every BATON_BEAT_INTERVAL_SECONDS) lists the jobs due for attention and
sends one `reconcile_job` per job, to the queue that can drive it. `reconcile_job` takes an id
and calls the engine, which re-reads the row and works under the job's claim; running it twice,
late, or on two workers at once is harmless. Neither task carries state of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import redis
from sqlalchemy import select
from sqlalchemy.exc import OperationalError as DatabaseUnavailable

from orchestrator.api.deps import Services
from orchestrator.celery_app import (
    FAN_OUT_TASK,
    NOTIFY_TASK,
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
from orchestrator.queries import as_utc
from orchestrator.service import build_services, build_webhook_client
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
    """Send a reconcile for every due job not already dispatched; returns how many were sent."""
    current = runtime()
    now = utcnow()
    due = current.services.engine.due_job_ids(now)
    sent = 0
    for start in range(0, len(due), _BATCH):
        batch = due[start : start + _BATCH]
        backends = job_backends(current.services.db, batch)
        for job_id in current.guard.hold([job_id for job_id in batch if job_id in backends]):
            queue = queue_for(backends[job_id], settings.local_host)
            reconcile_job.apply_async((job_id, now.timestamp()), queue=queue)
            sent += 1
    current.guard.mark_fan_out(now)
    return sent


def reconcile_lag(db: Database, job_id: str, due_seen_at: float | None) -> float | None:
    """Seconds since the job fell due: its next_attempt_at, or else when beat saw it due."""
    with db.transaction() as session:
        due_at = session.scalar(select(Job.next_attempt_at).where(Job.id == job_id))
    if due_at is not None:
        return max(0.0, (utcnow() - as_utc(due_at)).total_seconds())
    if due_seen_at is not None:
        return max(0.0, time.time() - due_seen_at)
    return None  # a nudge: nothing was late


def reconcile(job_id: str, due_seen_at: float | None) -> None:
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
        try:
            current.guard.release(job_id)
        except redis.RedisError as exc:  # the guard expires by itself
            log.warning("dispatch guard of job %s not released: %s", job_id, exc)


fan_out_task = app.task(name=FAN_OUT_TASK, ignore_result=True)(fan_out)
reconcile_job = app.task(
    name=RECONCILE_TASK,
    ignore_result=True,
    # The database went away for a moment: look again soon, with backoff and jitter, a few
    # times (short countdowns only); after that beat finds the job due on a later tick.
    autoretry_for=(DatabaseUnavailable,),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=3,
)(reconcile)


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
