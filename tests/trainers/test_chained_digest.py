"""Every trainer, chained over real worker processes, ends bitwise equal to one uninterrupted run:
the same model digest, the same committed checkpoint and the same logged metrics. Segments end by
SIGTERM (the stop step agreed on every rank), by the session deadline, and by completion."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.support.chains import ChainRuns, run_chain
from tests.support.segments import output_checkpoint
from tests.trainers.chain_cases import CASES, Case, first_segment, untimed
from worker.boundary.contract import Outcome
from worker.boundary.manifest import verify_checkpoint


@pytest.mark.parametrize(
    "case", [pytest.param(case, id=case.name, marks=case.marks) for case in CASES]
)
def test_chained_segments_end_with_the_uninterrupted_digest(
    case: Case, chain_runs: ChainRuns, tmp_path: Path
) -> None:
    whole_run = chain_runs.whole_run(case.name, case.spec, case.timeout)
    whole = whole_run.results[0]
    start = first_segment(chain_runs, case)
    chain = run_chain(case.spec, case.plan, tmp_path, whole, timeout=case.timeout, start=start)
    if case.check_segment is not None:
        for root, spec, result in zip(chain.roots, chain.specs, chain.results, strict=True):
            case.check_segment(output_checkpoint(root, spec), result)

    outcomes = chain.outcomes
    assert len(outcomes) >= 3, outcomes
    assert outcomes[: len(case.first_outcomes)] == case.first_outcomes, outcomes
    assert outcomes[-1] == Outcome.COMPLETED, outcomes
    assert chain.results[0].start_step == 0
    for before, after in itertools.pairwise(chain.results):
        assert after.start_step == before.end_step
        if case.every_segment_trains:
            assert before.end_step > before.start_step
    assert chain.results[-1].end_step == case.spec.total_steps
    assert chain.results[-1].model_digest == whole.model_digest
    assert verify_checkpoint(chain.checkpoint).model_digest == whole.model_digest

    chained = [m for r in chain.results for m in r.metrics]
    if case.metrics == "all":
        assert chained == whole.metrics
    elif case.metrics == "untimed":
        assert untimed(chained) == untimed(whole.metrics)
    elif case.metrics == "loss":
        assert {m["step"]: m["loss"] for m in chained} == {
            m["step"]: m["loss"] for m in whole.metrics
        }
    else:
        by_step = {m["step"]: m for m in chained}
        for metric in whole.metrics:
            if metric["step"] in by_step:
                assert by_step[metric["step"]] == metric
    if case.check_chain is not None:
        case.check_chain(chain, whole_run)
