"""Two ranks, a session whose first step would already overrun its deadline: the segment takes
no step and commits the checkpoint it was given again, and the job still ends on the
uninterrupted weights."""

import pytest

from tests.support.segments import (
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
)
from worker.boundary.contract import Estimates, Outcome
from worker.boundary.manifest import verify_checkpoint

pytestmark = pytest.mark.slow


def test_a_two_rank_segment_with_no_time_for_a_step_recommits_its_input(tmp_path):
    whole_spec = make_spec(nproc=2, total_steps=12)
    whole = make_root(tmp_path / "whole", whole_spec)
    assert run_worker(whole, timeout=300).returncode == 0

    first = make_spec(nproc=2, total_steps=5)
    assert run_worker(make_root(tmp_path / "seg0", first), timeout=300).returncode == 0
    done = read_result(tmp_path / "seg0", first)
    # The previous segment's step time says one step takes longer than the whole session.
    short = next_spec(
        first, done, total_steps=12, estimates=Estimates(step_seconds=10 * first.limit_seconds)
    )
    make_root(tmp_path / "seg1", short, resume_from=output_checkpoint(tmp_path / "seg0", first))
    finished = run_worker(tmp_path / "seg1", timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    skipped = read_result(tmp_path / "seg1", short)
    assert (skipped.outcome, skipped.start_step, skipped.end_step) == (Outcome.DEADLINE, 5, 5)
    manifest = verify_checkpoint(output_checkpoint(tmp_path / "seg1", short))
    assert (manifest.segment_index, manifest.step) == (1, 5)

    rest = next_spec(short, skipped, estimates=Estimates())
    make_root(tmp_path / "seg2", rest, resume_from=output_checkpoint(tmp_path / "seg1", short))
    assert run_worker(tmp_path / "seg2", timeout=300).returncode == 0
    final = read_result(tmp_path / "seg2", rest)
    assert (final.outcome, final.end_step) == (Outcome.COMPLETED, 12)
    assert final.model_digest == read_result(whole, whole_spec).model_digest
