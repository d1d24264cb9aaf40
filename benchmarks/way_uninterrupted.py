"""Way (a): the whole job in one local session with no limit, Baton's own yardstick."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.records import SessionRecord, WayResult
from benchmarks.workload import Workload, job_spec
from orchestrator.reference import run_uninterrupted
from orchestrator.spec import JobSpec

KEY, TITLE = "a", "uninterrupted"


def run(workload: Workload, workdir: Path) -> WayResult:
    started = time.time()
    collected = run_uninterrupted(JobSpec.model_validate(job_spec(workload)), workdir)
    total_wall = time.time() - started
    result, manifest = collected.result, collected.manifest
    if result is None or manifest is None:
        raise RuntimeError(f"the uninterrupted run failed: {collected.problem}")
    timings = result.timings
    session = SessionRecord(
        wall=collected.session_seconds or timings.total,
        first_step=timings.startup + timings.load,
        load=timings.load,
        train=timings.train,
        saves=[timings.save],
        start_step=0,
        trained_to=result.end_step,
        kept_to=result.end_step,
        outcome=result.outcome,
    )
    return WayResult(KEY, TITLE, [session], total_wall, manifest.step, manifest.model_digest)
