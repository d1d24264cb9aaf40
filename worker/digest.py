"""model_digest: one sha256 over a model's tensors, comparable across machines and runs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

DIGEST_FORMAT = b"baton-model-digest-v1"


def model_digest(tensors: Mapping[str, Tensor]) -> str:
    """sha256 over (key, dtype, shape, raw bytes) of every tensor, in sorted key order."""
    import torch

    digest = hashlib.sha256(DIGEST_FORMAT)
    for key in sorted(tensors):
        tensor = tensors[key].detach().to("cpu").contiguous()
        header = f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0{tensor.numel()}\0"
        # Length-prefix every record so no two different models can serialize to one stream.
        digest.update(len(header).to_bytes(8, "little"))
        digest.update(header.encode())
        # A uint8 view reads any dtype (bfloat16 included) as its exact in-memory bytes.
        raw = tensor.reshape(-1).view(torch.uint8).numpy()
        digest.update(raw.nbytes.to_bytes(8, "little"))
        digest.update(raw.tobytes())
    return digest.hexdigest()
