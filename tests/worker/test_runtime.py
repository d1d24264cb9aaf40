"""SegmentRunner in-process, with a fake clock: deadlines land on exact, repeatable steps."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from tests.support.clock import TickingClock
from tests.support.segments import (
    REPO_ROOT,
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
)
from worker.boundary.contract import CheckpointRef, Outcome, SegmentResult
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.boundary.paths import HEARTBEAT_FILE, RESULT_FILE, SEGMENT_FILE
from worker.runtime import (
    EXIT_COMMITTED,
    EXIT_FAILED,
    EXIT_REJECTED,
    SegmentRunner,
    exit_code_for,
    main,
)
from worker.stopflag import StopFlag


def run(root, spec, stop_flag=None, clock=None) -> SegmentResult:
    if not (root / SEGMENT_FILE).exists():
        make_root(root, spec)
    runner = SegmentRunner(
        spec,
        root,
        process_start=0.0,
        clock=clock or TickingClock(),
        stop_flag=stop_flag or StopFlag(),
    )
    return runner.run()


def run_chain(tmp_path, spec):
    results, roots = [], []
    while not results or results[-1].outcome != Outcome.COMPLETED:
        if results:
            spec = next_spec(spec, results[-1])
        root = tmp_path / f"seg{spec.segment_index}"
        resume = output_checkpoint(roots[-1], spec) if roots else None
        make_root(root, spec, resume_from=resume)
        results.append(run(root, spec))
        roots.append(root)
        assert len(results) < 20, "chain makes no progress"
    return results


def test_deadline_chain_matches_uninterrupted_run(tmp_path):
    spec = make_spec(total_steps=40, config={"log_every": 7})
    whole = run(tmp_path / "whole", spec)
    assert whole.outcome == Outcome.COMPLETED
    # Each reading of the fake clock is 1 s: a 40 s session fits about a dozen steps.
    short = make_spec(total_steps=40, limit_seconds=40.0, config={"log_every": 7})
    chained = run_chain(tmp_path / "short", short)
    assert len(chained) >= 3
    assert [r.outcome for r in chained[:-1]] == [Outcome.DEADLINE] * (len(chained) - 1)
    for before, after in itertools.pairwise(chained):
        assert after.start_step == before.end_step > before.start_step
    assert chained[-1].end_step == 40
    assert chained[-1].model_digest == whole.model_digest


def test_metrics_are_every_log_every_steps_plus_the_last(tmp_path):
    result = run(tmp_path, make_spec(total_steps=23, config={"log_every": 10}))
    assert [m["step"] for m in result.metrics] == [10, 20, 23]
    assert set(result.metrics[0]) == {"step", "loss", "lr"}


def test_result_json_is_written_with_timings(tmp_path):
    spec = make_spec(total_steps=5)
    run(tmp_path, spec)
    data = json.loads((tmp_path / spec.output_dir / RESULT_FILE).read_text())
    assert data["outcome"] == Outcome.COMPLETED
    assert (data["start_step"], data["end_step"]) == (0, 5)
    assert data["timings"]["train"] > 0
    assert data["timings"]["total"] > 0
    assert data["model_digest"] == verify_checkpoint(output_checkpoint(tmp_path, spec)).model_digest


def test_stop_flag_ends_the_segment_with_a_commit(tmp_path):
    flag = StopFlag()
    flag.set()
    spec = make_spec(total_steps=5)
    result = run(tmp_path, spec, stop_flag=flag)
    assert (result.outcome, result.end_step) == (Outcome.STOPPED, 0)
    assert verify_checkpoint(output_checkpoint(tmp_path, spec)).step == 0


def test_no_time_for_one_step_still_commits_the_resumed_state(tmp_path):
    first = make_spec(total_steps=10)
    done = run(tmp_path / "a", first)
    # 3 s of session: startup and load readings use it up before the first step.
    spec = next_spec(first, done, limit_seconds=3.0, total_steps=20)
    make_root(tmp_path / "b", spec, resume_from=output_checkpoint(tmp_path / "a", first))
    result = run(tmp_path / "b", spec)
    assert (result.outcome, result.start_step, result.end_step) == (Outcome.DEADLINE, 10, 10)
    manifest = verify_checkpoint(output_checkpoint(tmp_path / "b", spec))
    assert (manifest.segment_index, manifest.step) == (1, 10)
    assert manifest.model_digest == done.model_digest


def test_exception_fails_the_segment_without_a_commit(tmp_path):
    spec = make_spec(total_steps=10, config={"fail_at_step": 4})
    result = run(tmp_path, spec)
    assert result.outcome == Outcome.FAILED
    assert "injected failure at step 4" in (result.error or "")
    assert result.end_step == result.start_step == 0
    assert not output_checkpoint(tmp_path, spec).exists()
    assert exit_code_for(result.outcome) == EXIT_FAILED


def test_unknown_trainer_fails(tmp_path):
    result = run(tmp_path, make_spec(trainer="tests.support.trainers:Nope"))
    assert result.outcome == Outcome.FAILED
    assert "Nope" in (result.error or "")


def corrupt(path):
    (path / "trainer.pt").write_bytes(b"garbage")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no checkpoint directory"),
        ("tampered", "does not match"),
        ("stale", "not the expected one"),
        ("no-expect", "without expect"),
        ("no-path", "no resume_path"),
    ],
)
def test_bad_resume_input_is_rejected_never_trained_from_scratch(tmp_path, case, message):
    first = make_spec(total_steps=4)
    done = run(tmp_path / "a", first)
    spec = next_spec(first, done)
    if case == "stale":
        spec = next_spec(first, done, expect=CheckpointRef("job-1", 0, 3))
    elif case == "no-expect":
        spec = next_spec(first, done, expect=None)
    elif case == "no-path":
        spec = next_spec(first, done, resume_path=None)
    resume = None if case == "missing" else output_checkpoint(tmp_path / "a", first)
    root = make_root(tmp_path / "b", spec, resume_from=resume)
    if case == "tampered":
        corrupt(root / "input" / "checkpoint")
    result = run(root, spec)
    assert result.outcome == Outcome.REJECTED
    assert message in (result.error or "")
    assert result.end_step == result.start_step
    assert exit_code_for(result.outcome) == EXIT_REJECTED
    with pytest.raises(CorruptCheckpoint):
        verify_checkpoint(output_checkpoint(root, spec))


def test_main_exit_codes(tmp_path):
    first = make_spec(total_steps=3)
    ok = make_root(tmp_path / "ok", first)
    assert main(["--root", str(ok), "--started-at", "0"]) == EXIT_COMMITTED  # long past: deadline
    assert read_outcome(ok) == Outcome.DEADLINE
    assert main(["--root", str(tmp_path / "empty")]) == EXIT_FAILED
    # Stale: a real, intact checkpoint is mounted, but it is not the step the spec expects.
    done = read_result(ok, first)
    stale = next_spec(first, done, expect=CheckpointRef("job-1", 0, done.end_step + 1))
    root = make_root(tmp_path / "stale", stale, resume_from=output_checkpoint(ok, first))
    assert verify_checkpoint(root / "input" / "checkpoint").step == done.end_step
    assert main(["--root", str(root)]) == EXIT_REJECTED
    assert read_outcome(root) == Outcome.REJECTED
    error = json.loads((root / "working" / RESULT_FILE).read_text())["error"]
    assert "not the expected one" in error


BALLAST_BYTES = 40_000_000  # the size-based save estimate grows by 0.4 s


@pytest.mark.parametrize("start", ["fresh", "resumed"])
def test_the_save_estimate_follows_the_state_size(tmp_path, start):
    """With no measured save time, the deadline keeps time to write the state the segment holds
    (its own state when fresh, the checkpoint's size when resumed): a larger state stops sooner."""
    steps = {}
    for ballast in (0, BALLAST_BYTES):
        root = tmp_path / f"ballast-{ballast}"
        config = {"state_bytes": ballast}
        spec = make_spec(total_steps=10_000, limit_seconds=20.0, config=config)
        if start == "resumed":
            first = make_spec(total_steps=1, config=config)
            done = run(root / "first", first)
            spec = next_spec(first, done, total_steps=10_000, limit_seconds=20.0)
            make_root(root / "second", spec, resume_from=output_checkpoint(root / "first", first))
            root = root / "second"
        # 10 ms per clock reading: about 600 steps fit in the 20 s session.
        result = run(root, spec, clock=TickingClock(tick=0.01))
        assert result.outcome == Outcome.DEADLINE
        steps[ballast] = result.end_step - result.start_step
    # 0.4 s more of save estimate is about 13 steps of 30 ms less training.
    assert steps[BALLAST_BYTES] <= steps[0] - 10


def read_outcome(root):
    return json.loads((root / "working" / RESULT_FILE).read_text())["outcome"]


def test_heartbeat_reports_the_latest_step_loss_and_step_time(tmp_path):
    spec = make_spec(total_steps=6, config={"log_every": 100})
    result = run(tmp_path, spec)
    beat = json.loads((tmp_path / spec.output_dir / HEARTBEAT_FILE).read_text())
    # The fake clock's readings are 1 s apart, so every step is at least a second after the last.
    assert beat["step"] == 6
    assert beat["loss"] == result.metrics[-1]["loss"]
    # Every scalar of the step, for the page's live point of whichever metric it draws.
    assert beat["metrics"] == {k: v for k, v in result.metrics[-1].items() if k != "step"}
    assert beat["step_seconds"] == pytest.approx(result.step_time_ema)
    assert isinstance(beat["at"], float)
    # Where the session's time went so far, for the page's timeline of a running session.
    assert beat["phases"]["startup"] == result.timings.startup
    assert beat["phases"]["load"] == result.timings.load
    assert 0 < beat["phases"]["train"] <= result.timings.train


# A fresh interpreter for each: whether TorchInductor is imported depends on what ran before.
DETERMINISM_BEFORE_INDUCTOR = """
import sys, torch
from worker.runtime import configure_torch
configure_torch({})
assert torch.are_deterministic_algorithms_enabled()
assert "torch._dynamo" not in sys.modules and "sympy" not in sys.modules
import torch._inductor.config as inductor_config
assert inductor_config.deterministic  # a trainer that compiles gets deterministic kernels
"""
DETERMINISM_AFTER_INDUCTOR = """
import torch
import torch._inductor.config as inductor_config
from worker.runtime import configure_torch
assert not inductor_config.deterministic
configure_torch({})
assert torch.are_deterministic_algorithms_enabled() and inductor_config.deterministic
"""


@pytest.mark.parametrize("code", [DETERMINISM_BEFORE_INDUCTOR, DETERMINISM_AFTER_INDUCTOR])
def test_deterministic_kernels_reach_inductor_whenever_it_is_imported(code):
    """The runtime turns deterministic algorithms on without importing TorchInductor (1.1 s of CPU
    in every rank), and Inductor is deterministic too, imported before or after."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, check=True)
