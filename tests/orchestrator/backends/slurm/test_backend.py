"""The Slurm backend against a real single-node Slurm (tests/support/slurm_cluster.sh): chained
one-minute allocations end on the uninterrupted digest, each by the worker's own commit; a
segment scancel'ed from outside is retried; `baton cancel` ends the Slurm job at once; a crash
right after sbatch adopts the job instead of submitting it twice; two ranks chain too; the
preflight reports what it saw."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.registry import StaticBackends
from orchestrator.backends.slurm.commands import ENDED_STATES
from orchestrator.backends.slurm.preflight import Outcome, run_check
from orchestrator.backends.slurm.script import job_name
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import UserAction
from orchestrator.models import Checkpoint, Segment
from orchestrator.spec import JobSpec, SlurmSpec
from tests.factories import guaranteed_segments, job_spec, reference_digest
from tests.support.engine_runs import job_and_segments, reconcile_until_finished
from tests.support.slurm import SlurmCluster
from worker.boundary.paths import SessionPaths

# Slurm's walltime is whole minutes: one minute per allocation. Each step sleeps, so the work
# needs at least four allocations on any machine (tests.factories.guaranteed_segments).
MINUTE = {"limit_seconds": 60, "margin": {"k_steps": 2.0, "safety_seconds": 1.0}}
CHAIN_TIMEOUT = 900
# The orchestrator's tick in these chains: the backend reads Slurm's state once a second
# (tests.support.slurm), so a tighter loop only spends the CPU the sessions need.
TICK_SECONDS = 0.2


def slurm_spec(total_steps: int, step_sleep: float, **overrides: Any) -> dict[str, Any]:
    return job_spec(
        backend="slurm",
        total_steps=total_steps,
        config={"step_sleep": step_sleep},
        session=MINUTE,
        **overrides,
    )


def engine_on(cluster: SlurmCluster, db: Database, data: Path, spec: dict[str, Any]) -> Engine:
    options = SlurmSpec.model_validate(spec.get("slurm") or {})
    backend = cluster.backend(data / "slurm", options)
    return Engine(db, StaticBackends({"slurm": backend}), data / "checkpoints")


def submit(engine: Engine, spec: dict[str, Any]) -> tuple[str, str]:
    with engine.db.transaction() as session:
        user_id = get_or_create_user(session, ADMIN_USER).id
    return user_id, engine.submit(user_id, JobSpec.model_validate(spec)).id


def reference_beside(spec: dict[str, Any], workdir: Path) -> Future[str]:
    """The uninterrupted run's digest, computed locally while the chain runs on Slurm."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(reference_digest, spec, workdir)
    pool.shutdown(wait=False)
    return future


def final_digest(db: Database, job_id: str, step: int) -> str:
    with db.transaction() as session:
        rows = session.query(Checkpoint).filter_by(job_id=job_id, step=step).all()
    assert len(rows) == 1
    return rows[0].model_digest


def ended_record(data: Path, segment: Segment) -> dict[str, Any]:
    return json.loads(SessionPaths(data / "slurm" / segment.launch_id).slurm_ended.read_text())


def test_one_minute_allocations_chain_to_the_uninterrupted_digest(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=760, step_sleep=0.25)
    assert guaranteed_segments(spec) >= 4
    engine = engine_on(slurm_cluster, sqlite_db, tmp_path / "data", spec)
    _, job_id = submit(engine, spec)
    reference = reference_beside(spec, tmp_path / "ref")
    reconcile_until_finished(engine, CHAIN_TIMEOUT, TICK_SECONDS)
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded", job.reason
    assert len(segments) >= 4
    # Every allocation ended by the worker's own commit before its end time: the deadline,
    # then completion; never Slurm's kill (the batch script ran to its end, exit 0).
    outcomes = [s.outcome for s in segments]
    expected = ["deadline"] * (len(segments) - 1) + ["completed"]
    assert outcomes == expected, [(s.outcome, s.error) for s in segments]
    for segment in segments:
        assert ended_record(tmp_path / "data", segment)["exit_code"] == 0
        started = json.loads(
            SessionPaths(tmp_path / "data" / "slurm" / segment.launch_id).slurm_started.read_text()
        )
        assert float(started["deadline"]) <= float(started["end_time"])
    assert [s.start_step for s in segments[1:]] == [s.end_step for s in segments[:-1]]
    assert final_digest(sqlite_db, job_id, 760) == reference.result()


def _scancel_when_running(cluster: SlurmCluster, db: Database, job_id: str) -> str:
    """scancel the job's second segment once it has trained a few steps; its launch id."""
    deadline = time.monotonic() + CHAIN_TIMEOUT
    while time.monotonic() < deadline:
        _, segments = job_and_segments(db, job_id)
        second = segments[1] if len(segments) > 1 else None
        if second is not None and second.handle is not None:
            beat = second.progress or {}
            if beat.get("step", 0) > second.start_step + 5:
                slurm_job = second.handle.rpartition("@")[2]
                subprocess.run(["scancel", slurm_job], env=cluster.env, check=True)
                return second.launch_id
        time.sleep(0.5)
    raise AssertionError("the second segment never ran")


def test_a_segment_scancelled_from_outside_is_retried_from_the_last_commit(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=300, step_sleep=0.25)
    engine = engine_on(slurm_cluster, sqlite_db, tmp_path / "data", spec)
    _, job_id = submit(engine, spec)
    reference = reference_beside(spec, tmp_path / "ref")
    cancelled: list[str] = []
    watcher = threading.Thread(
        target=lambda: cancelled.append(_scancel_when_running(slurm_cluster, sqlite_db, job_id))
    )
    watcher.start()
    reconcile_until_finished(engine, CHAIN_TIMEOUT, TICK_SECONDS)
    watcher.join()
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded", job.reason
    hit = next(s for s in segments if s.launch_id == cancelled[0])
    after = segments[hit.index + 1]
    # The scancel'ed segment either committed on Slurm's TERM (outcome stopped) or left nothing;
    # the next segment starts from the last commit either way.
    last_commit = hit.end_step if hit.state == "succeeded" else segments[hit.index - 1].end_step
    assert hit.outcome in ("stopped", "failed", "lost")
    assert after.start_step == last_commit
    assert final_digest(sqlite_db, job_id, 300) == reference.result()


def test_baton_cancel_ends_the_slurm_job_within_one_tick(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=2000, step_sleep=0.25)
    engine = engine_on(slurm_cluster, sqlite_db, tmp_path / "data", spec)
    user_id, job_id = submit(engine, spec)
    deadline = time.monotonic() + 120
    handle = None
    while handle is None and time.monotonic() < deadline:
        engine.reconcile_job(job_id)
        _, segments = job_and_segments(sqlite_db, job_id)
        handle = segments[0].handle if segments else None
        time.sleep(0.5)
    assert handle is not None
    slurm_job = handle.rpartition("@")[2]
    assert slurm_cluster.squeue_state(slurm_job) in ("PENDING", "RUNNING")
    engine.act(user_id, job_id, UserAction.CANCEL)
    engine.reconcile_job(job_id)  # one tick
    assert slurm_cluster.squeue_state(slurm_job) in ENDED_STATES | {"COMPLETING"}
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "cancelled"
    assert segments[0].state == "cancelled"


def test_a_crash_right_after_sbatch_adopts_the_job_instead_of_submitting_it_again(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=40, step_sleep=0.1)
    data = tmp_path / "data"
    engine = engine_on(slurm_cluster, sqlite_db, data, spec)
    _, job_id = submit(engine, spec)
    url = str(sqlite_db.engine.url)

    def orchestrator(die_at: str) -> int:
        command = [sys.executable, "-m", "tests.support.slurm_orchestrator", url, str(data)]
        return subprocess.run(
            [*command, job_id, die_at], env=slurm_cluster.env, timeout=600, check=False
        ).returncode

    reference = reference_beside(spec, tmp_path / "ref")
    assert orchestrator("submitted") == -signal.SIGKILL
    _, segments = job_and_segments(sqlite_db, job_id)
    assert [(s.state, s.handle) for s in segments] == [("launching", None)]
    assert orchestrator("never") == 0
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded", job.reason
    for segment in segments:
        submitted = slurm_cluster.jobs().named(job_name(segment.launch_id))
        assert len(submitted) == 1, f"{segment.launch_id} was submitted {len(submitted)} times"
    assert final_digest(sqlite_db, job_id, 40) == reference.result()


def test_two_ranks_chain_across_allocations_to_the_digest(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=240, step_sleep=0.25, nproc=2, slurm={"cpus": 2})
    assert guaranteed_segments(spec) >= 2
    engine = engine_on(slurm_cluster, sqlite_db, tmp_path / "data", spec)
    _, job_id = submit(engine, spec)
    reference = reference_beside(spec, tmp_path / "ref")
    reconcile_until_finished(engine, CHAIN_TIMEOUT, TICK_SECONDS)
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded", job.reason
    assert len(segments) >= 2
    assert {s.outcome for s in segments[:-1]} == {"deadline"}
    assert final_digest(sqlite_db, job_id, 240) == reference.result()


def test_the_preflight_reports_limits_end_time_signal_and_shared_filesystem(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    report = run_check(slurm_cluster.jobs(), tmp_path, SlurmSpec())
    outcomes = {check.name: check for check in report.checks}
    assert report.passed, report.checks
    assert "MaxTime=" in outcomes["partition"].detail
    assert outcomes["shared filesystem"].outcome is Outcome.OK
    # A one-minute allocation, as the job itself read it.
    assert "s after its start" in outcomes["end time"].detail
    assert outcomes["signal"].outcome in (Outcome.OK, Outcome.WARN)


def test_a_pending_segment_shows_slurms_reason_as_the_jobs_wait_reason(
    slurm_cluster: SlurmCluster, sqlite_db: Database, tmp_path: Path
) -> None:
    spec = slurm_spec(total_steps=40, step_sleep=0.1)
    # Held back by a start time an hour away (an option users cannot pass: tests only), so the
    # job pends without taking the cluster from the other tests.
    held = SlurmSpec.model_construct(cpus=1, sbatch_options=["--begin=now+3600"])
    backend = slurm_cluster.backend(tmp_path / "slurm", held)
    engine = Engine(sqlite_db, StaticBackends({"slurm": backend}), tmp_path / "checkpoints")
    user_id, job_id = submit(engine, spec)
    try:
        deadline = time.monotonic() + 60
        job, _ = job_and_segments(sqlite_db, job_id)
        while job.queue_reason is None and time.monotonic() < deadline:
            engine.reconcile_job(job_id)
            time.sleep(0.5)
            job, segments = job_and_segments(sqlite_db, job_id)
        assert job.state == "running"
        assert job.queue_reason == "waiting in the queue: BeginTime"
        # Released, it starts: the reason goes.
        slurm_job = segments[0].handle.rpartition("@")[2]
        release = ["scontrol", "update", f"JobId={slurm_job}", "StartTime=now"]
        subprocess.run(release, env=slurm_cluster.env, check=True)
        while job.queue_reason is not None and time.monotonic() < deadline:
            engine.reconcile_job(job_id)
            time.sleep(0.5)
            job, _ = job_and_segments(sqlite_db, job_id)
        assert job.queue_reason is None
    finally:
        engine.act(user_id, job_id, UserAction.CANCEL)
        engine.reconcile_job(job_id)
    _, segments = job_and_segments(sqlite_db, job_id)
    assert segments[0].handle is not None
    state = slurm_cluster.squeue_state(segments[0].handle.rpartition("@")[2])
    assert state in ENDED_STATES | {"COMPLETING"}
