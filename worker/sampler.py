"""ResumableSampler: a shuffled data order that resumes at the exact next index.

The order of epoch e is a permutation drawn from (seed, e) with a private torch.Generator, so it
never touches the global RNG and never depends on how many batches were drawn before. Resuming
restores (epoch, position) and continues; nothing is replayed or skipped batch by batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


def epoch_seed(seed: int, epoch: int) -> int:
    """Mix seed and epoch so that (seed, epoch+1) and (seed+1, epoch) give unrelated orders."""
    mixed = hashlib.sha256(f"baton-sampler:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(mixed[:8], "little") & (2**63 - 1)


class ResumableSampler:
    """Indices 0..num_samples-1 in a per-epoch order, sharded across ranks, with state.

    Each rank sees every world_size-th index of the epoch's order, starting at `rank`; the order
    is padded by wrapping around so every rank gets the same count (like DistributedSampler).
    `position` counts indices this rank has consumed in the current epoch.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if num_samples <= 0:
            raise ValueError("num_samples must be positive")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.position = 0
        self._order_epoch: int | None = None
        self._order: list[int] = []

    def __len__(self) -> int:
        """Indices per rank per epoch."""
        return -(-self.num_samples // self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Move to `epoch`; setting the current epoch again keeps the position (resume-safe)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.position = 0

    def take(self, count: int) -> list[int]:
        """The next `count` indices, continuing into the next epoch when this one runs out."""
        taken: list[int] = []
        while len(taken) < count:
            order = self._rank_order()
            end = min(len(order), self.position + count - len(taken))
            taken.extend(order[self.position : end])
            self.position = end
            if self.position == len(order):
                self.epoch += 1
                self.position = 0
        return taken

    def __iter__(self) -> Iterator[int]:
        """The rest of the current epoch, for a DataLoader with num_workers=0.

        Worker processes prefetch ahead of training, so with num_workers>0 the position would
        count prefetched indices, not trained ones; use `take` from the training step instead.
        """
        epoch = self.epoch
        while self.epoch == epoch:
            yield self.take(1)[0]

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "num_samples": self.num_samples,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A different dataset size or rank count changes every order: resuming would not be exact.
        for key in ("num_samples", "world_size"):
            if key in state and int(state[key]) != getattr(self, key):
                raise ValueError(
                    f"sampler {key} changed since the checkpoint: "
                    f"{int(state[key])} -> {getattr(self, key)}"
                )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])

    def _rank_order(self) -> list[int]:
        if self._order_epoch != self.epoch:
            full = self._epoch_order().tolist()
            padded_len = len(self) * self.world_size
            while len(full) < padded_len:
                full += full[: padded_len - len(full)]
            self._order = full[self.rank :: self.world_size]
            self._order_epoch = self.epoch
        return self._order

    def _epoch_order(self) -> Tensor:
        import torch

        if not self.shuffle:
            return torch.arange(self.num_samples)
        generator = torch.Generator()
        generator.manual_seed(epoch_seed(self.seed, self.epoch))
        return torch.randperm(self.num_samples, generator=generator)
