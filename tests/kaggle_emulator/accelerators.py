"""Which accelerator a push asks for, from `machine_shape`, `enable_gpu` and `enable_tpu`.

`machine_shape` wins when set: "Nvidia*" shapes are GPUs ("NvidiaTeslaT4" is 2xT4), "Tpu*" shapes
are TPUs. Without it, `enable_gpu` alone means a GPU session (Kaggle gives a P100 then).
"""

from __future__ import annotations

import enum


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
