"""Runs a job's spec in one session without a deadline: the yardstick a chained run must match."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from orchestrator.backends.base import Collected, LaunchRequest, SessionStatus
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.planner import SegmentPlan, build_segment_spec
from orchestrator.spec import JobSpec
from worker.boundary.contract import Estimates
from worker.boundary.paths import CHECKPOINT_DIR

_POLL_SECONDS = 0.2


def run_uninterrupted(
    spec: JobSpec,
    workdir: Path,
    *,
    job_id: str = "reference",
    limit_seconds: float = 24 * 3600,
    python: str | None = None,
    estimates: Estimates | None = None,
    warm_start: bool = True,
) -> Collected:
    """Train all of `spec` in a single local session and collect its checkpoint; `estimates`:
    the costs earlier segments measured, as a chained segment gets them (none by default)."""
    backend = LocalBackend(workdir / "sessions", python=python, warm_start=warm_start)
    plan = SegmentPlan(
        index=0,
        start_step=0,
        limit_seconds=limit_seconds,
        estimates=estimates or Estimates(),
        resume=None,
    )
    launch_id = f"reference-{uuid.uuid4().hex[:8]}"
    handle = backend.launch(LaunchRequest(launch_id, build_segment_spec(job_id, spec, plan), None))
    while backend.status(handle) in (SessionStatus.QUEUED, SessionStatus.RUNNING):
        time.sleep(_POLL_SECONDS)
    return backend.collect(handle, workdir / CHECKPOINT_DIR)
