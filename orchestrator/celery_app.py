"""The Celery application's configuration, its queues, and the nudge that the API sends.

Celery messages are hints only (DESIGN.md): the database is the source of truth, beat re-derives
what is due every tick, a lost message costs one tick and a duplicate one is harmless. Hence:
late acks, one message prefetched at a time, no results stored, retries with short jittered
countdowns only (a long ETA is redelivered in a loop by the Redis transport), and every task far
shorter than the broker's visibility timeout.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from celery import Celery
from kombu.exceptions import OperationalError as BrokerUnavailable

from orchestrator.config import Settings

log = logging.getLogger(__name__)

SHARED_QUEUE = "baton"
# Webhook deliveries wait on receivers: their own queue and workers, never the engine's.
NOTIFY_QUEUE = "baton.notify"
FAN_OUT_TASK = "baton.fan_out"
RECONCILE_TASK = "baton.reconcile_job"
RECONCILE_BATCH_TASK = "baton.reconcile_jobs"
NOTIFY_TASK = "baton.deliver_notifications"
# Longer than any reconcile can take (a few DB statements and backend calls, each bounded by
# BATON_KAGGLE_CALL_TIMEOUT_SECONDS) by a wide margin; a message unacked this long is redelivered.
VISIBILITY_TIMEOUT_SECONDS = 3600
_KEY_PREFIX = "baton:"


def local_queue(host: str) -> str:
    """The queue of the host that runs local sessions: only its workers can see their PIDs."""
    return f"{SHARED_QUEUE}.local.{host}"


def queue_for(backend: str, local_host: str) -> str:
    """Local jobs are driven on the host of their sessions; any worker can drive the rest."""
    return local_queue(local_host) if backend == "local" else SHARED_QUEUE


def make_app(settings: Settings) -> Celery:
    app = Celery("baton", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        # A worker killed mid-task: its message goes back to the queue rather than being lost.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=SHARED_QUEUE,
        task_routes={NOTIFY_TASK: {"queue": NOTIFY_QUEUE}},
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        worker_send_task_events=True,  # Flower and `celery events` see the workers
        task_send_sent_event=True,
        # A nudge is a hint: with the broker down, give up quickly rather than stall a request.
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
        beat_schedule={
            "fan-out-due-jobs": {
                "task": FAN_OUT_TASK,
                "schedule": settings.beat_interval_seconds,
                # A fan-out nobody ran in time is useless: the next one supersedes it.
                "options": {"expires": max(5.0, 5 * settings.beat_interval_seconds)},
            },
            # Webhook notifications (orchestrator/notifier.py), on their own queue (`baton
            # worker --notifications`); a pass is safe to overlap.
            "deliver-notifications": {
                "task": NOTIFY_TASK,
                "schedule": settings.notify_interval_seconds,
                "options": {
                    "queue": NOTIFY_QUEUE,
                    "expires": max(5.0, 5 * settings.notify_interval_seconds),
                },
            },
        },
    )
    return app


class DispatchGuard:
    """At most one reconcile message per job in flight, so a slow queue does not snowball.

    Kept in Redis with an expiry: losing it (a Redis restart) costs one duplicate message, and
    a holder that died frees it after `seconds` (BATON_DISPATCH_GUARD_SECONDS).
    """

    def __init__(self, client: redis.Redis, seconds: float) -> None:
        self.client = client
        self.milliseconds = int(seconds * 1000)

    def hold(self, job_ids: list[str]) -> list[str]:
        """Takes the guard of each job that has none; returns those (one round trip)."""
        pipeline = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipeline.set(f"{_KEY_PREFIX}due:{job_id}", 1, nx=True, px=self.milliseconds)
        taken = pipeline.execute()
        return [job_id for job_id, ok in zip(job_ids, taken, strict=True) if ok]

    def release(self, job_id: str) -> None:
        self.client.delete(f"{_KEY_PREFIX}due:{job_id}")

    def release_all(self, job_ids: list[str]) -> None:
        """One round trip for a batch."""
        if job_ids:
            self.client.delete(*(f"{_KEY_PREFIX}due:{job_id}" for job_id in job_ids))

    def mark_fan_out(self, at: datetime) -> None:
        self.client.set(f"{_KEY_PREFIX}last_fan_out", at.timestamp())

    def last_fan_out(self) -> float | None:
        value = self.client.get(f"{_KEY_PREFIX}last_fan_out")
        return float(value) if value is not None else None


class CeleryNudger:
    """Sends "look at this job now" after the API's transaction committed (never inside it)."""

    def __init__(self, app: Celery, local_host: str) -> None:
        self.app = app
        self.local_host = local_host

    def __call__(self, job_id: str, backend: str) -> None:
        try:
            self.app.send_task(
                RECONCILE_TASK, args=(job_id, None), queue=queue_for(backend, self.local_host)
            )
        except (BrokerUnavailable, redis.RedisError, OSError) as exc:
            # The change is committed; beat finds the job on its next tick anyway.
            log.warning("nudge for job %s not sent (%s); beat will pick it up", job_id, exc)
