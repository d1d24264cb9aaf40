"""Which accelerator a push asks for, from `machine_shape`, `enable_gpu` and `enable_tpu`.

`machine_shape` wins when set: "Nvidia*" shapes are GPUs ("NvidiaTeslaT4" is 2xT4), "Tpu*" shapes
are TPUs. Without it, `enable_gpu` alone means a GPU session (Kaggle gives a P100 then).
"""

from __future__ import annotations

import enum
from collections.abc import Collection


class Accelerator(enum.StrEnum):
    NONE = "none"
    GPU = "gpu"
    TPU = "tpu"


def accelerator_for(machine_shape: str | None, enable_gpu: bool, enable_tpu: bool) -> Accelerator:
    shape = (machine_shape or "").lower()
    if shape.startswith("nvidia"):
        return Accelerator.GPU
    if shape.startswith("tpu"):
        return Accelerator.TPU
    if shape:
        return Accelerator.NONE
    if enable_tpu:
        return Accelerator.TPU
    return Accelerator.GPU if enable_gpu else Accelerator.NONE


# Every GPU session is 2 x T4 since 2026-09: "NvidiaTeslaT4", retired P100 requests and
# `enable_gpu` alone all run there.
GPUS_PER_SESSION = 2


def machine_for(accelerator: Accelerator, withheld: Collection[str]) -> str:
    """What a session's machine has ("gpu:2", "tpu" or "none"), told to the kernel through
    worker.accelerator.EMULATED_ENV. `withheld` accelerators run on the standard image instead,
    as a TPU push did on Kaggle (kaggle-api #1197)."""
    if accelerator is Accelerator.NONE or accelerator.value in withheld:
        return "none"
    return f"gpu:{GPUS_PER_SESSION}" if accelerator is Accelerator.GPU else "tpu"
