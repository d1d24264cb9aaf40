"""Fault injection: which calls fail, and how. Seeded, so a test sees the same faults every run.

A failure drawn before a call is handled (429, 500, a dropped connection) has no side effect.
`lost_response_rate` and `fail_next(..., LOST_RESPONSE)` are the nasty case: the call takes
effect, then its response is lost (after `hang_seconds`), as when a push times out client-side.
`SERVER_ERROR_AFTER_EFFECT` (scripted only) takes effect, then answers 500.
"""

from __future__ import annotations

import enum
import random
import threading
from collections import deque
from dataclasses import dataclass, field


class FaultKind(enum.StrEnum):
    RATE_LIMITED = "429"
    SERVER_ERROR = "500"
    DROP = "drop"  # the connection closes before any response, after hang_seconds
    LOST_RESPONSE = "lost_response"  # the call takes effect, then the connection closes
    # The call takes effect, then answers 500: CreateDataset in kaggle-api #424 (issue 17).
    SERVER_ERROR_AFTER_EFFECT = "500_after_effect"
    # 404 before handling, no side effect: a read that lags behind a fresh write (scripted only).
    NOT_FOUND = "404"
    STALE_MOUNT = "stale_mount"  # a kernel mounts the version before the one it named
    DATASET_OUTCOME = "dataset_outcome"  # a dataset version ends other than READY
    # 200 with `body_error` in the response's `error`, no side effect: how Kaggle refuses a
    # dataset create or version (the CLI prints "Dataset version creation error: ...").
    BODY_ERROR = "body_error"


@dataclass
class Faults:
    rate: float = 0.0
    kinds: tuple[FaultKind, ...] = (
        FaultKind.RATE_LIMITED,
        FaultKind.SERVER_ERROR,
        FaultKind.DROP,
    )
    lost_response_rate: float = 0.0
    hang_seconds: float = 0.0
    retry_after_seconds: float | None = 0.0
    body_error: str = "The request could not be processed (injected)"
    # RPC method names ("SaveKernel") that may fail; None means every method.
    methods: frozenset[str] | None = None
    # Also fail blob uploads (PUT) and file downloads (GET) at `rate`.
    on_transfers: bool = False
    # Kernel refs ("owner/slug") whose status stays RUNNING whatever the session does.
    stuck_running: set[str] = field(default_factory=set)
    # The next this-many dataset mounts that name a version get the one before it instead, as
    # when Kaggle serves a kernel a stale copy of a freshly published dataset.
    stale_mounts: int = 0
    # What the next dataset versions' processing ends in ("FAILED", "DELETED", ...), in turn;
    # READY once this runs out.
    dataset_outcomes: list[str] = field(default_factory=list)
    # Output listings answer for the latest version whatever version they name, as the
    # client's kernels_output does (kaggle-cli #1200).
    ignore_output_labels: bool = False
    seed: int = 0
    injected: list[tuple[str, FaultKind]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._scripted: dict[str, deque[FaultKind]] = {}
        self._lock = threading.Lock()

    def take_stale_mount(self) -> bool:
        with self._lock:
            if self.stale_mounts <= 0:
                return False
            self.stale_mounts -= 1
            self.injected.append(("mount", FaultKind.STALE_MOUNT))
            return True

    def take_dataset_outcome(self) -> str:
        with self._lock:
            if not self.dataset_outcomes:
                return "READY"
            outcome = self.dataset_outcomes.pop(0)
            self.injected.append(("dataset_version", FaultKind.DATASET_OUTCOME))
            return outcome

    def reseed(self, seed: int) -> None:
        with self._lock:
            self.seed = seed
            self._random = random.Random(seed)

    def fail_next(self, method: str, kind: FaultKind, times: int = 1) -> None:
        """Make the next `times` calls of `method` fail with `kind`, whatever the rate."""
        with self._lock:
            self._scripted.setdefault(method, deque()).extend([kind] * times)

    def draw(self, method: str, transfer: bool = False) -> FaultKind | None:
        """The fault for this call, if any; records it in `injected`."""
        with self._lock:
            scripted = self._scripted.get(method)
            kind = scripted.popleft() if scripted else self._random_fault(method, transfer)
            if kind is not None:
                self.injected.append((method, kind))
            return kind

    def _random_fault(self, method: str, transfer: bool) -> FaultKind | None:
        # Always draw the same numbers per call so that the sequence does not depend on rates.
        failure, lost, pick = self._random.random(), self._random.random(), self._random.random()
        eligible = self.on_transfers if transfer else self.methods is None or method in self.methods
        if not eligible:
            return None
        if failure < self.rate and self.kinds:
            return self.kinds[int(pick * len(self.kinds))]
        if not transfer and lost < self.lost_response_rate:
            return FaultKind.LOST_RESPONSE
        return None

    def count(self, kind: FaultKind) -> int:
        return sum(1 for _, k in self.injected if k == kind)
