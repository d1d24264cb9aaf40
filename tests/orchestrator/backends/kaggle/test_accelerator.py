"""A segment promised an accelerator fails with the reason when its emulated Kaggle session runs
without it (kaggle-api #1197), instead of training on CPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.backends.base import LaunchRequest, SessionStatus
from orchestrator.backends.kaggle.backend import KaggleBackend
from orchestrator.spec import JobSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import start_emulator
from tests.support.kaggle import account_on
from worker.boundary.contract import Outcome, SegmentSpec


@pytest.mark.parametrize(
    ("accelerator", "withheld", "reason"),
    [
        ("t4x2", "gpu", "promised 2 GPUs but CUDA sees 0"),
        ("tpu", "tpu", "promised a TPU but has no accelerator"),
    ],
)
def test_a_session_without_its_promised_accelerator_fails_with_the_reason(
    tmp_path: Path, accelerator: str, withheld: str, reason: str
) -> None:
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({withheld})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        spec = JobSpec.model_validate(kaggle_spec({"accelerator": accelerator}))
        assert spec.kaggle is not None
        backend = KaggleBackend(
            account_on(emulator), "j1", spec.kaggle, tmp_path / "kaggle" / "j1", poll_seconds=0
        )
        segment = SegmentSpec("j1", 0, spec.trainer, spec.config, spec.total_steps, 20.0)
        handle = backend.launch(LaunchRequest("j1-00000", segment, None))
        deadline = time.monotonic() + 60
        while backend.status(handle) is not SessionStatus.FINISHED:
            assert time.monotonic() < deadline, "the session never ended"
            time.sleep(0.2)
        collected = backend.collect(handle, tmp_path / "store" / "00000")
        assert emulator.internal_errors == []
    assert collected.result is not None, collected.problem
    assert collected.result.outcome == Outcome.FAILED
    assert collected.result.end_step == 0  # not one step trained on what was left
    assert reason in (collected.result.error or "")
