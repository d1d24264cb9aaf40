"""Prometheus metrics: what the database says at scrape time, plus this process's own counters.

Job and segment figures are read from the database when scraped, so every API replica reports
the same truth however many workers wrote it. Backend errors and reconcile lag happen inside
whichever process reconciles: the API's embedded loop reports them on the API's `/metrics`, and
each Celery worker on its own metrics port (`baton worker --metrics-port`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import and_, exists, func, select
from sqlalchemy.orm import aliased

from orchestrator.backends.base import (
    Backend,
    BackendError,
    Collected,
    Gone,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Slot,
    Transient,
)
from orchestrator.backends.registry import BackendResolver
from orchestrator.db import Database
from orchestrator.lifecycle import JobState
from orchestrator.models import Job, Segment, utcnow
from worker.boundary.contract import CheckpointRef
from worker.boundary.heartbeat import Heartbeat

P = ParamSpec("P")
T = TypeVar("T")

# Sessions run from seconds (tests, the demo) to Kaggle's 12 h.
SEGMENT_SECONDS_BUCKETS = (5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200)
LAG_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
QUOTA_WINDOW = timedelta(days=7)  # Kaggle's quota is weekly

BACKEND_ERRORS = Counter(
    "baton_backend_errors",
    "Errors backends raised, by backend and kind (transient, rejected, gone)",
    ["backend", "kind"],
)
RECONCILE_LAG = Histogram(
    "baton_reconcile_lag_seconds",
    "From a job falling due (beat finding it due) to a worker starting to reconcile it",
    buckets=LAG_SECONDS_BUCKETS,
)
RECONCILES = Counter("baton_reconciles", "Jobs reconciled by this process")


def error_kind(error: BackendError) -> str:
    if isinstance(error, Transient):
        return "transient"
    if isinstance(error, Rejected):
        return "rejected"
    if isinstance(error, Gone):
        return "gone"
    return "other"


class DatabaseCollector(Collector):
    """Jobs by state, segments launched and retried, segment durations, quota used (7 days)."""

    def __init__(self, db: Database, clock: Any = utcnow) -> None:
        self.db = db
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        with self.db.transaction() as session:
            by_state: dict[str, int] = {
                state: count
                for state, count in session.execute(
                    select(Job.state, func.count()).group_by(Job.state)
                )
            }
            launched = session.scalar(select(func.count()).where(Segment.launched_at.is_not(None)))
            earlier = aliased(Segment)
            # A retry re-runs from where an earlier segment of the same job started.
            retried = session.scalar(
                select(func.count())
                .select_from(Segment)
                .where(
                    exists().where(
                        and_(
                            earlier.job_id == Segment.job_id,
                            earlier.index < Segment.index,
                            earlier.start_step == Segment.start_step,
                        )
                    )
                )
            )
            ended = session.execute(
                select(Job.backend, Segment.launched_at, Segment.ended_at)
                .join(Job, Job.id == Segment.job_id)
                .where(Segment.launched_at.is_not(None), Segment.ended_at.is_not(None))
            ).all()
        jobs = GaugeMetricFamily("baton_jobs", "Jobs by state", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], by_state.get(state.value, 0))
        yield jobs
        yield CounterMetricFamily(
            "baton_segments_launched", "Segments launched as sessions", value=launched or 0
        )
        yield CounterMetricFamily(
            "baton_segment_retries",
            "Segments that re-ran an earlier one's steps",
            value=retried or 0,
        )
        yield from self._durations(ended)

    def _durations(self, ended: Iterable[Any]) -> Iterator[Metric]:
        by_backend: dict[str, list[float]] = {}
        used: dict[str, float] = {}
        since = self.clock() - QUOTA_WINDOW
        for backend, launched_at, ended_at in ended:
            seconds = max(0.0, (ended_at - launched_at).total_seconds())
            by_backend.setdefault(backend, []).append(seconds)
            if ended_at >= since:
                used[backend] = used.get(backend, 0.0) + seconds
        histogram = HistogramMetricFamily(
            "baton_segment_duration_seconds", "Session time of ended segments", labels=["backend"]
        )
        for backend, values in sorted(by_backend.items()):
            buckets = [
                (str(bound), float(sum(1 for v in values if v <= bound)))
                for bound in SEGMENT_SECONDS_BUCKETS
            ]
            buckets.append(("+Inf", float(len(values))))
            histogram.add_metric([backend], buckets, sum(values))
        yield histogram
        quota = GaugeMetricFamily(
            "baton_quota_used_seconds",
            "Session time used in the last 7 days (Kaggle's quota window), by backend",
            labels=["backend"],
        )
        for backend, seconds in sorted(used.items()):
            quota.add_metric([backend], seconds)
        yield quota


def api_registry(db: Database) -> CollectorRegistry:
    """What the API's /metrics serves: the database's figures and this process's counters."""
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(db))
    for metric in (BACKEND_ERRORS, RECONCILE_LAG, RECONCILES):
        registry.register(metric)
    return registry


def process_registry() -> CollectorRegistry:
    """What a Celery worker serves on its metrics port: its own counters."""
    registry = CollectorRegistry()
    for metric in (BACKEND_ERRORS, RECONCILE_LAG, RECONCILES):
        registry.register(metric)
    return registry


class CountingBackend:
    """A backend that counts the errors the wrapped one raises, by kind, and re-raises them."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.poll_seconds = inner.poll_seconds
        self.overrun_slack_seconds = inner.overrun_slack_seconds

    @property
    def slot(self) -> Slot:
        return self.inner.slot

    def _counted(self, method: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except BackendError as error:
            BACKEND_ERRORS.labels(self.name, error_kind(error)).inc()
            raise

    def launch(self, request: LaunchRequest) -> str:
        return self._counted(self.inner.launch, request)

    def find(self, launch_id: str) -> str | None:
        return self._counted(self.inner.find, launch_id)

    def status(self, handle: str) -> SessionStatus:
        return self._counted(self.inner.status, handle)

    def collect(self, handle: str, store: Path) -> Collected:
        return self._counted(self.inner.collect, handle, store)

    def cancel(self, handle: str) -> bool:
        return self._counted(self.inner.cancel, handle)

    def request_stop(self, handle: str) -> None:
        self._counted(self.inner.request_stop, handle)

    def quota(self) -> Quota | None:
        return self._counted(self.inner.quota)

    def log_file(self, handle: str) -> Path | None:
        return self._counted(self.inner.log_file, handle)

    def progress(self, handle: str) -> Heartbeat | None:
        return self._counted(self.inner.progress, handle)

    def queue_reason(self, handle: str) -> str | None:
        return self._counted(self.inner.queue_reason, handle)

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        return self._counted(self.inner.fetch_checkpoint, stored, expect)


class CountingBackends:
    """The resolver whose backends count their errors (BACKEND_ERRORS)."""

    def __init__(self, inner: BackendResolver) -> None:
        self.inner = inner

    def for_job(self, job: Job) -> Backend:
        try:
            backend = self.inner.for_job(job)
        except BackendError as error:
            BACKEND_ERRORS.labels(job.backend, error_kind(error)).inc()
            raise
        return CountingBackend(backend)
