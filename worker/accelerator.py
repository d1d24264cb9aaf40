"""The accelerator a Kaggle session was promised, checked against what the session can see.

Kaggle may run a push on the standard image without the accelerator it asked for (a TPU push,
kaggle-api #1197), and a job would then spend its session training on CPU. So a Kaggle segment
that was promised GPUs or a TPU checks at start and fails, with the reason, if they are absent.
Standard library (torch is imported only to count GPUs): this runs inside the kernel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The Kaggle API emulator stands in for Kaggle's machines on hosts that have none of them, and
# names here what its session was given ("gpu:2", "tpu" or "none"). Kaggle never sets it.
EMULATED_ENV = "BATON_KAGGLE_EMULATED_ACCELERATOR"
# Device nodes of a TPU VM: /dev/accel* (v2 to v4) or /dev/vfio/<n> (v5e, v6e).
_TPU_DEVICE_GLOBS = ("accel*", "vfio/[0-9]*")


@dataclass(frozen=True)
class Accelerators:
    """GPUs and TPU: what a session was promised, or what it can see."""

    gpus: int = 0
    tpu: bool = False

    @classmethod
    def parse(cls, text: str) -> Accelerators:
        """`gpu:<n>`, `tpu` or `none`."""
        kind, _, count = text.strip().lower().partition(":")
        if kind == "gpu":
            return cls(gpus=int(count or 1))
        return cls(tpu=kind == "tpu")

    def __str__(self) -> str:
        if self.tpu:
            return "a TPU"
        if self.gpus:
            return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}"
        return "no accelerator"


def accelerator_problem(promised: Accelerators, visible: Accelerators) -> str | None:
    """Why this session cannot run the segment it was promised hardware for; None if it can."""
    if promised.tpu and not visible.tpu:
        return f"the session was promised a TPU but has {visible} (kaggle-api #1197)"
    if promised.gpus and visible.gpus < promised.gpus:
        return f"the session was promised {promised} but CUDA sees {visible.gpus}"
    return None


def visible_accelerators(dev: Path = Path("/dev")) -> Accelerators:
    """What this process can use: CUDA devices through torch, a TPU through its device nodes."""
    emulated = os.environ.get(EMULATED_ENV)
    if emulated is not None:
        return Accelerators.parse(emulated)
    tpu = any(any(dev.glob(pattern)) for pattern in _TPU_DEVICE_GLOBS)
    return Accelerators(gpus=_cuda_devices(), tpu=tpu)


def _cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
