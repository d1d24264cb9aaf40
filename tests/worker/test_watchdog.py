"""The session's watchdog: hung steps end the session with the stacks in the log, and a loss that
stays NaN stops it without committing, naming the last good checkpoint."""

import dataclasses
import math

import pytest

from tests.support.clock import TickingClock
from tests.support.segments import (
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
)
from worker.boundary.contract import Outcome, WatchdogPolicy
from worker.boundary.manifest import verify_checkpoint
from worker.runtime import EXIT_FAILED, SegmentRunner
from worker.stopflag import StopFlag
from worker.watchdog import DivergenceCounter, HangWatch, hang_bound

POLICY = WatchdogPolicy(hang_multiple=10.0, hang_floor_seconds=30.0, divergence_steps=3)


def test_the_hang_bound_is_a_multiple_of_the_step_time_with_a_floor():
    assert hang_bound(None, POLICY) == 30.0  # nothing measured yet: the floor
    assert hang_bound(1.0, POLICY) == 30.0
    assert hang_bound(12.0, POLICY) == 120.0


def test_the_watch_fires_only_once_no_step_ended_within_the_bound():
    now = [100.0]
    watch = HangWatch(POLICY, lambda: now[0], on_hang=lambda reason: None)
    assert watch.check(1000.0) is None  # not watching before training starts
    watch.beat(step=7, step_seconds=5.0)  # bound: 50 s from t=100
    assert watch.check(150.0) is None
    reason = watch.check(150.5)
    assert reason is not None
    assert "no step ended within 50 s after step 7" in reason
    now[0] = 150.0
    watch.beat(step=8, step_seconds=5.0)
    assert watch.check(150.5) is None


def test_divergence_needs_consecutive_non_finite_steps():
    counter = DivergenceCounter(limit=3)
    nan, inf = math.nan, math.inf
    steps = [
        {"loss": nan},
        {"loss": nan},
        {"loss": 1.0},  # a finite step resets the count
        {"loss": 1.0, "grad_norm": inf},
        {"loss": nan},
    ]
    assert [counter.record(i, m) for i, m in enumerate(steps, start=1)] == [False] * 5
    assert counter.record(6, {"loss": nan}) is True
    assert counter.first_bad_step == 4


def run_in_process(root, spec):
    if not root.exists():
        make_root(root, spec)
    runner = SegmentRunner(
        spec, root, process_start=0.0, clock=TickingClock(), stop_flag=StopFlag()
    )
    return runner.run()


def test_a_diverged_segment_commits_nothing_and_names_the_last_good_checkpoint(tmp_path):
    first = make_spec(total_steps=4)
    done = run_in_process(tmp_path / "a", first)
    assert (done.outcome, done.end_step) == (Outcome.COMPLETED, 4)
    # From the 7th step on the loss is NaN: steps 7, 8, 9 in a row diverge the run.
    spec = next_spec(first, done, total_steps=20, config={"nan_from_step": 7})
    make_root(tmp_path / "b", spec, resume_from=output_checkpoint(tmp_path / "a", first))
    result = run_in_process(tmp_path / "b", spec)
    assert result.outcome == Outcome.DIVERGED
    assert result.error == "diverged at step 7; last good checkpoint at step 4"
    assert (result.start_step, result.end_step, result.model_digest) == (4, 4, None)
    assert not output_checkpoint(tmp_path / "b", spec).exists()
    # The loss series shows the run going bad.
    assert [m["step"] for m in result.metrics if math.isnan(m["loss"])] == [7, 8, 9]


def test_a_first_segment_that_diverges_has_no_good_checkpoint(tmp_path):
    spec = make_spec(total_steps=20, config={"nan_from_step": 2})
    result = run_in_process(tmp_path, spec)
    assert result.outcome == Outcome.DIVERGED
    assert (
        result.error
        == "diverged at step 2; last good checkpoint at none (the job restarts at step 0)"
    )


def watched(spec, **policy):
    return dataclasses.replace(spec, watchdog=WatchdogPolicy(**{**vars(POLICY), **policy}))


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_hung_step_ends_every_rank_with_the_stacks_in_the_log(tmp_path, nproc):
    """One rank blocks forever at step 3: every rank ends, the log holds each thread's stack,
    and the retry (the fault armed once) completes with the uninterrupted weights."""
    config = {"step_sleep": 0.05, "hang_at_step": 3, "hang_rank": nproc - 1}
    config["fault_marker"] = str(tmp_path / "hung-once")
    # Floor 3 s: far above a 0.05 s step on any machine, far below the test's patience.
    spec = watched(make_spec(total_steps=8, config=config, nproc=nproc), hang_floor_seconds=3.0)
    root = make_root(tmp_path / "hung", spec)
    hung = run_worker(root, timeout=300)
    assert hung.returncode == EXIT_FAILED
    result = read_result(root, spec)
    assert result.outcome == Outcome.FAILED
    assert "hung: no step ended within 3 s after step 3 " in (result.error or "")
    if nproc == 2:
        assert (result.error or "").startswith("rank 1: hung")
        # Each rank's lines reach the log named: the hung rank's stacks are rank 1's.
        assert "[rank0]:" in hung.stderr
        assert any(
            line.startswith("[rank1]:") and "in train_step" in line
            for line in hung.stderr.splitlines()
        )
    assert "Thread 0x" in hung.stderr
    assert "in train_step" in hung.stderr
    assert not output_checkpoint(root, spec).exists()

    retry = make_root(tmp_path / "retry", spec)
    finished = run_worker(retry, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    clean = dataclasses.replace(spec, config={"step_sleep": 0.05})
    whole = make_root(tmp_path / "whole", clean)
    assert run_worker(whole, timeout=300).returncode == 0
    assert read_result(retry, spec).model_digest == read_result(whole, clean).model_digest
    assert verify_checkpoint(output_checkpoint(retry, spec)).step == 8
