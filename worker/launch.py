"""Starts the ranks of a multi-rank segment under torchrun and reports how they ended.

`python -m worker --root DIR` with `nproc > 1` in segment.json becomes this launcher. It runs
torchrun's agent in its own interpreter (worker/torchrun.py), in the same session directory, so
every backend that starts the worker gets multi-rank segments for free. torchrun's elastic agent
watches the ranks: when one exits non-zero or is killed, it stops the others (no restarts: a
retry is the orchestrator's decision, from the last commit). Rank 0 writes result.json; if it
died before it could, this launcher writes the failure, so a segment never ends without a result.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from worker.boundary.contract import Outcome, SegmentResult, SegmentSpec
from worker.boundary.paths import RESULT_FILE, SessionPaths
from worker.rank_notes import clear_rank_notes, peer_failure
from worker.reasons import one_line
from worker.torchrun import FirstFailure, run_torchrun

log = logging.getLogger("worker.launch")

# How often torchrun's agent looks at its ranks; a dead rank is noticed within this.
MONITOR_INTERVAL_SECONDS = 0.2


# Each rank's lines reach the session log prefixed with its rank, "[rank1]:" (the job page names
# ranks by it: orchestrator/api/ui/log_view.py). torchrun tees them from per-rank files.
RANK_LINE_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
RANK_LINE_PREFIX = "[rank${rank}]:"


def torchrun_args(root: Path, nproc: int, started_at: float, rank_logs: Path) -> list[str]:
    return [
        "--standalone",  # a private rendezvous on a free local port
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        f"--monitor-interval={MONITOR_INTERVAL_SECONDS}",
        "--tee=3",  # both streams of every rank, to its file and on to this session's log
        f"--log-dir={rank_logs}",
        "-m",
        "worker",
        "--root",
        str(root),
        "--started-at",
        repr(started_at),
    ]


def launch_ranks(spec: SegmentSpec, root: Path, started_at: float) -> SegmentResult:
    """Run every rank to its end; return rank 0's result, or a failure if it left none."""
    result_path = root / spec.output_dir / RESULT_FILE
    # A result left by an earlier attempt must not pass for this one's.
    result_path.unlink(missing_ok=True)
    paths = SessionPaths(root)
    clear_rank_notes(paths)
    report = paths.first_failure
    report.unlink(missing_ok=True)
    rank_logs = Path(tempfile.mkdtemp(prefix="baton-rank-logs-"))
    os.environ[RANK_LINE_PREFIX_ENV] = RANK_LINE_PREFIX  # read by the agent, in this process
    try:
        returncode = run_torchrun(report, torchrun_args(root, spec.nproc, started_at, rank_logs))
    finally:
        del os.environ[RANK_LINE_PREFIX_ENV]
        shutil.rmtree(rank_logs, ignore_errors=True)
    first = FirstFailure.read(report)
    if result_path.exists():
        return _name_the_failed_rank(SegmentResult.read(result_path), first, result_path)
    log.error("torchrun exited %d and rank 0 left no result", returncode)
    start_step = spec.expect.step if spec.expect else 0
    result = SegmentResult(
        job_id=spec.job_id,
        segment_index=spec.segment_index,
        outcome=Outcome.FAILED,
        start_step=start_step,
        end_step=start_step,
        limit_seconds=spec.limit_seconds,
        error=peer_failure(paths, 0)
        or (first.describe() if first is not None else None)
        or f"a rank failed before rank 0 reported; torchrun exited {returncode}",
    )
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result.write(result_path)
    return result


def _name_the_failed_rank(
    result: SegmentResult, first: FirstFailure | None, path: Path
) -> SegmentResult:
    """Rank 0 reported what it saw, a broken collective; say which rank failed first."""
    if result.outcome != Outcome.FAILED or first is None or first.rank == 0:
        return result
    if (result.error or "").startswith("rank "):
        return result  # that rank left its own reason (worker.rank_notes)
    result.error = one_line(f"{first.describe()}; rank 0 saw: {result.error}")
    result.write(path)
    return result
