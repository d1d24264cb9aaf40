"""TinyCharLM chained over real worker processes ends bitwise equal to one uninterrupted run."""

import itertools
import math
from pathlib import Path

import pytest
import yaml

from tests.factories import STEP_SCALE
from tests.support.segments import (
    REPO_ROOT,
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    start_worker,
)
from trainers.tiny_lm import warmup_cosine
from worker.boundary.contract import Outcome, SegmentResult, SegmentSpec
from worker.boundary.manifest import verify_checkpoint
from worker.runtime import import_trainer

TOTAL_STEPS = 200
# Small enough for ~15 ms steps; stride 256 gives ~20 steps an epoch, so the chain crosses
# epoch boundaries, the LR warmup and the cosine decay.
CONFIG = {
    "d_model": 32,
    "n_layer": 2,
    "n_head": 4,
    "block_size": 32,
    "batch_size": 8,
    "stride": 256,
    "warmup_steps": 10,
    "dropout": 0.2,
    "log_every": 5,
    # A floor under the step time: the deadline segment below must stop on its deadline, with
    # steps left, however fast the machine is.
    "min_step_seconds": 0.05 * STEP_SCALE,
}


def lm_spec(**overrides) -> SegmentSpec:
    return make_spec(
        job_id="tiny-lm",
        trainer="trainers.tiny_lm:TinyCharLM",
        config=CONFIG,
        total_steps=TOTAL_STEPS,
        seed=3,
        **overrides,
    )


def run_until_step_logged(root: Path, steps_past_start: int, start: int) -> int:
    """Run a worker, SIGTERM it once its log shows `steps_past_start` more steps."""
    process = start_worker(root)
    assert process.stderr is not None
    for line in process.stderr:
        if " step " in line and "/" in line:
            done = int(line.split(" step ")[1].split("/")[0])
            if done >= start + steps_past_start:
                process.terminate()
                break
    process.communicate(timeout=120)
    return process.returncode


def run_segment(root: Path, spec: SegmentSpec, how: str) -> SegmentResult:
    if how == "sigterm":
        returncode = run_until_step_logged(root, 10, spec.expect.step if spec.expect else 0)
    else:
        returncode = run_worker(root).returncode
    assert returncode == 0
    return read_result(root, spec)


@pytest.mark.slow
@pytest.mark.chained_digest
def test_chained_segments_end_with_the_uninterrupted_digest(tmp_path):
    whole_spec = lm_spec()
    whole_root = make_root(tmp_path / "whole", whole_spec)
    whole = run_segment(whole_root, whole_spec, "complete")
    assert (whole.outcome, whole.end_step) == (Outcome.COMPLETED, TOTAL_STEPS)
    overhead = whole.timings.startup + whole.timings.load

    # Segment ends by every real mechanism: SIGTERM, the session deadline, SIGTERM, completion.
    plan = ["sigterm", "deadline", "sigterm", "complete"]
    spec, root, results = lm_spec(), None, []
    for index, how in enumerate(plan):
        if results:
            # A deadline segment gets well under a second of training after its startup.
            limit = overhead + 2.2 if how == "deadline" else whole_spec.limit_seconds
            spec = next_spec(spec, results[-1], limit_seconds=limit)
        previous = root
        root = tmp_path / f"seg{index}"
        make_root(root, spec, resume_from=output_checkpoint(previous, spec) if previous else None)
        results.append(run_segment(root, spec, how))
        if results[-1].outcome == Outcome.COMPLETED:
            break

    outcomes = [r.outcome for r in results]
    assert len(results) >= 3, outcomes
    assert outcomes[0] == Outcome.STOPPED
    assert outcomes[1] == Outcome.DEADLINE
    assert outcomes[-1] == Outcome.COMPLETED
    assert results[0].start_step == 0
    for before, after in itertools.pairwise(results):
        assert after.start_step == before.end_step
    assert results[-1].end_step == TOTAL_STEPS
    assert results[-1].model_digest == whole.model_digest
    final = verify_checkpoint(output_checkpoint(root, spec))
    assert final.model_digest == whole.model_digest
    # The loss at each logged step matches too, not only the end state.
    chained_metrics = {m["step"]: m for r in results for m in r.metrics}
    for metric in whole.metrics:
        if metric["step"] in chained_metrics:
            assert chained_metrics[metric["step"]] == metric


def test_schedule_warms_up_then_decays_to_the_floor():
    factor = warmup_cosine(warmup=10, total=110, min_ratio=0.1)
    assert factor(0) == pytest.approx(0.1)
    assert factor(9) == pytest.approx(1.0)
    assert factor(60) == pytest.approx(0.55)
    assert factor(110) == pytest.approx(0.1)
    assert all(factor(s) >= factor(s + 1) for s in range(10, 120))
    assert not math.isnan(factor(10_000))


def test_demo_spec_names_an_importable_trainer():
    demo = yaml.safe_load((REPO_ROOT / "trainers" / "examples" / "demo.yaml").read_text())
    assert demo["name"] == "demo-tiny-lm"
    assert demo["backend"] == "local"
    import_trainer(demo["trainer"])
    assert demo["total_steps"] > 0
    assert demo["session"]["limit_seconds"] > 0
