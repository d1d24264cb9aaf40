"""The promised-accelerator check: pure rule, device detection, and a CUDA-less subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.accelerator import (
    EMULATED_ENV,
    Accelerators,
    accelerator_problem,
    visible_accelerators,
)

T4X2, TPU, NONE = Accelerators(gpus=2), Accelerators(tpu=True), Accelerators()


@pytest.mark.parametrize(
    ("promised", "visible", "fails"),
    [
        (NONE, NONE, False),  # CPU jobs: nothing changes
        (NONE, T4X2, False),
        (T4X2, T4X2, False),
        (T4X2, Accelerators(gpus=1), True),  # half a t4x2 would give nproc=2 one rank per GPU
        (T4X2, NONE, True),
        (TPU, TPU, False),
        (TPU, NONE, True),  # kaggle-api #1197: the standard image for a TPU push
        (TPU, T4X2, True),
    ],
)
def test_only_the_promised_hardware_passes(
    promised: Accelerators, visible: Accelerators, fails: bool
) -> None:
    assert (accelerator_problem(promised, visible) is not None) is fails


def test_the_reason_names_what_was_promised_and_what_is_there() -> None:
    assert accelerator_problem(T4X2, NONE) == "the session was promised 2 GPUs but CUDA sees 0"
    assert accelerator_problem(TPU, NONE) == (
        "the session was promised a TPU but has no accelerator (kaggle-api #1197)"
    )


@pytest.mark.parametrize(
    ("text", "parsed"), [("gpu:2", T4X2), ("tpu", TPU), ("none", NONE), ("GPU", Accelerators(1))]
)
def test_the_emulators_machine_names_parse(text: str, parsed: Accelerators) -> None:
    assert Accelerators.parse(text) == parsed


@pytest.mark.parametrize("node", ["accel0", "vfio/0"])
def test_a_tpu_is_seen_through_its_device_nodes(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(EMULATED_ENV, raising=False)
    assert not visible_accelerators(tmp_path).tpu
    (tmp_path / node).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / node).touch()
    assert visible_accelerators(tmp_path).tpu


def test_a_process_without_cuda_sees_no_gpu(tmp_path: Path) -> None:
    """In a real subprocess with CUDA hidden (and on a machine with none), torch counts 0 GPUs,
    so a segment promised a t4x2 gets a reason instead of training on CPU."""
    env = {k: v for k, v in os.environ.items() if k != EMULATED_ENV}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = (
        "import pathlib, sys\n"
        "from worker.accelerator import Accelerators, accelerator_problem, visible_accelerators\n"
        "seen = visible_accelerators(pathlib.Path(sys.argv[1]))\n"
        "print(seen.gpus, seen.tpu, accelerator_problem(Accelerators(gpus=2), seen))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "0 False the session was promised 2 GPUs but CUDA sees 0"
