"""Response models of the REST API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, computed_field, field_validator

from orchestrator.spec import spec_warnings
from orchestrator.webhooks import redact_spec


class _FromRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    @field_validator("*", mode="after")
    @classmethod
    def _utc(cls, value: Any) -> Any:
        # SQLite hands back naive datetimes; every stored time is UTC.
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class LiveProgress(_FromRow):
    """The running segment's latest step: its heartbeat, or an estimate where none reaches us
    (Kaggle: elapsed time over the step time earlier segments measured)."""

    segment_index: int
    step: int
    loss: float | None
    step_seconds: float | None
    at: datetime | None  # when the heartbeat was written (or the estimate made)
    estimated: bool


class EtaOut(BaseModel):
    """When the job should finish, from its measured step time, sessions and overheads."""

    finish_at: datetime
    more_sessions: int
    quota_waits: int
    text: str  # e.g. "done Thu 14:00 UTC at 30 h/week, 3 more sessions"


class JobSummary(_FromRow):
    """A job as the job list shows it: state, progress, ETA and reason; no spec."""

    id: str
    name: str
    backend: str
    state: str
    steps_done: int
    total_steps: int
    pause_requested: bool
    wait_until: datetime | None
    reason: str | None
    # Why a queued job has not been launched yet (no free session slot), if it is waiting.
    queue_reason: str | None = None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # Set by the read layer (orchestrator/queries.py) while a segment runs.
    progress: LiveProgress | None = None
    eta: EtaOut | None = None


class JobOut(JobSummary):
    failures: int
    spec: dict[str, Any]

    @field_validator("spec", mode="after")
    @classmethod
    def _no_webhook_urls(cls, spec: dict[str, Any]) -> dict[str, Any]:
        # Webhook URLs are secrets: whatever returns a job shows only their hosts.
        return redact_spec(spec)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def warnings(self) -> list[str]:
        return spec_warnings(self.spec)


class JobList(BaseModel):
    items: list[JobSummary]
    total: int
    # Where the next page starts (`?cursor=`), or None on the last page: unlike `offset`, it
    # costs the same on every page and skips or repeats nothing while jobs are added.
    next_cursor: str | None = None


class SegmentTimings(BaseModel):
    startup: float | None = None
    load: float | None = None
    train: float | None = None
    save: float | None = None
    upload: float | None = None
    total: float | None = None
    session: float | None = None  # the backend's wall time for the whole session
    step_ema: float | None = None  # moving average of one training step


class SegmentOut(_FromRow):
    index: int
    state: str
    outcome: str | None
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings: SegmentTimings | None
    error: str | None
    checkpoint: dict[str, Any] | None
    created_at: datetime
    launched_at: datetime | None
    ended_at: datetime | None


class EventOut(_FromRow):
    id: int
    kind: str
    segment_index: int | None
    from_state: str | None
    to_state: str | None
    message: str | None
    created_at: datetime


class CheckpointOut(_FromRow):
    segment_index: int
    step: int
    model_digest: str
    bytes: int
    manifest: dict[str, Any]
    created_at: datetime


class MetricPoint(BaseModel):
    segment_index: int
    step: int
    values: dict[str, float]


class Health(BaseModel):
    status: str  # "ok" or "unhealthy"
    database: str  # the dialect: sqlite, postgresql
    # Each part: "ok", or a word for what is wrong ("read-only", "unreachable", "not writable").
    checks: dict[str, str]


class Readiness(BaseModel):
    status: str  # "ready" or "not ready"
    schema_state: str  # "ok", "behind" (migrations not applied) or "unreachable"


class QuotaOut(BaseModel):
    account: str  # the Kaggle user name
    accelerator: str
    seconds_left: float
    refresh_at: datetime | None
    allowance_seconds: float  # what each weekly refresh grants
