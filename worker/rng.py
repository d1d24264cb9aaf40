"""Capture and restore every RNG a training step can draw from, and seed them all at once.

States are stored as tensors and plain lists so that checkpoints load with weights_only=True.
"""

from __future__ import annotations

import random
from typing import Any

RngState = dict[str, Any]


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def capture_rng_state() -> RngState:
    import numpy as np
    import torch

    version, py_state, gauss = random.getstate()
    np_state = np.random.get_state(legacy=True)
    if not isinstance(np_state, tuple):  # legacy=True always gives the MT19937 tuple
        raise TypeError("unexpected numpy RNG state")
    kind, keys, pos, has_gauss, cached = np_state
    state: RngState = {
        "python": {"version": version, "state": list(py_state), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def restore_rng_state(state: RngState) -> None:
    """Restore a captured state; CUDA states apply only where this process has those devices."""
    import numpy as np
    import torch

    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        count = min(len(cuda_states), torch.cuda.device_count())
        for device in range(count):
            torch.cuda.set_rng_state(cuda_states[device], device)
