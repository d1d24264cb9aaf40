"""The REST API's wire models: what goes over HTTP, in and out.

Below the API, so that the read layer (orchestrator/queries.py), the CLI and Celery share them
without importing anything from orchestrator/api/.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
)

from orchestrator.clock import utcnow
from orchestrator.session_timings import SessionTimings
from orchestrator.webhooks import redact_spec


class _Wire(BaseModel):
    # Each model's validator is built on first use, not at import: the CLI uses a few of them
    # and must start at once (benchmarks/cli_latency.py).
    model_config = ConfigDict(defer_build=True)


class _FromRow(_Wire):
    model_config = ConfigDict(from_attributes=True)


class LiveProgress(_FromRow):
    """The running segment's latest step: its heartbeat, or an estimate where none reaches us
    (Kaggle: elapsed time over the step time earlier segments measured)."""

    segment_index: int
    step: int
    loss: float | None
    step_seconds: float | None
    at: datetime | None  # when the heartbeat was written (or the estimate made)
    estimated: bool
    # The heartbeat is older than the session's hang bound: it stopped (a frozen process, a
    # wedged host) and the session's own watchdog did not end it.
    stalled: bool = False
    # Seconds of start-up, load and training so far, as the heartbeat reported them.
    phases: dict[str, float] | None = None
    # Every scalar the latest step logged, as the heartbeat reported it (None: estimated).
    metrics: dict[str, float] | None = None


class EtaOut(_Wire):
    """When the job should finish, from its measured step time, sessions and overheads."""

    finish_at: datetime
    more_sessions: int
    quota_waits: int
    text: str  # e.g. "done Thu 14:00 UTC (13:40-14:30) at 30 h/week, 3 more sessions"
    earliest: datetime | None = None  # the finish's p10-p90 range
    latest: datetime | None = None


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
    # Why a queued job has not been launched yet (no free session slot), or why its launched
    # session still waits in the backend's own queue (Slurm's pending reason).
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
        # Here, not at the top: the spec's models take about 0.1 s to build, and the CLI
        # reads jobs without them (benchmarks/cli_latency.py).
        from orchestrator.spec import spec_warnings

        return spec_warnings(self.spec)


class JobList(_Wire):
    items: list[JobSummary]
    total: int
    # Where the next page starts (`?cursor=`), or None on the last page: unlike `offset`, it
    # costs the same on every page and skips or repeats nothing while jobs are added.
    next_cursor: str | None = None


class SegmentOut(_FromRow):
    index: int
    state: str
    outcome: str | None
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings: SessionTimings | None  # what the session and the orchestrator measured
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
    # Whether its files are still kept (downloadable); False: pruned by retention, or rejected.
    kept: bool = True
    # Kept on Kaggle only (the session published it): its first download fetches it here.
    on_kaggle: bool = False
    rejected: str | None = None


class MetricPoint(_Wire):
    segment_index: int
    step: int
    values: dict[str, float]


class Health(_Wire):
    status: str  # "ok" or "unhealthy"
    database: str  # the dialect: sqlite, postgresql
    # Each part: "ok", or a word for what is wrong ("read-only", "unreachable", "not writable").
    checks: dict[str, str]


class Readiness(_Wire):
    status: str  # "ready" or "not ready"
    schema_state: str  # "ok", "behind" (migrations not applied) or "unreachable"


class QuotaOut(_Wire):
    account: str  # the Kaggle user name
    accelerator: str
    seconds_left: float
    refresh_at: datetime | None
    allowance_seconds: float  # what each weekly refresh grants


# Tokens (/api/v1/tokens)

LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,63}$"
MAX_LIFETIME = timedelta(days=3650)


class TokenIn(BaseModel):  # a request body: built now (FastAPI warns on deferred ones)
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="cli", pattern=LABEL_PATTERN, description="A label for the token")
    expires_at: AwareDatetime | None = Field(
        default=None, description="When the token stops working (UTC offset required)"
    )

    @field_validator("expires_at")
    @classmethod
    def _in_the_future(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        now = utcnow()
        if value <= now:
            raise ValueError("expires_at must be in the future")
        if value - now > MAX_LIFETIME:
            raise ValueError("expires_at is more than 10 years away")
        return value


class TokenOut(_Wire):
    """A token as listed: never the token itself."""

    id: str
    name: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    # Made at start-up from BATON_ADMIN_TOKEN (or the token file): rotate it there.
    bootstrap: bool
    # The token this request was made with.
    current: bool


class NewToken(TokenOut):
    token: str = Field(description="The token itself: shown this once, stored only as a hash")


# Kaggle credentials (/api/v1/credentials/kaggle)

# Kaggle user names are letters, digits, '-' and '_'; 64 is the column's width.
USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# Printable ASCII without spaces: a pasted newline or space is a mistake, not part of a key.
KEY_PATTERN = r"^[!-~]+$"
MAX_KEY_LENGTH = 256


class MoveIn(BaseModel):  # a request body, built now like TokenIn
    """`baton move`: the backend the job continues on, and its Kaggle options (the job's own,
    kept from before, when none are given)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "kaggle"]
    kaggle: dict[str, Any] | None = None


class KaggleCredentialsIn(BaseModel):  # a request body, built now like TokenIn
    """What a user gives: the API and the CLI both validate with this model."""

    model_config = ConfigDict(extra="forbid")

    username: str = Field(pattern=USERNAME_PATTERN, description="Your Kaggle user name")
    key: str = Field(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        pattern=KEY_PATTERN,
        description="Your Kaggle API key; stored encrypted and never returned",
    )


class KaggleCredentialsOut(_Wire):
    username: str
    configured: bool
    updated_at: datetime
