"""A self-chaining kernel's successor honours the account's findings and its quota (issue 17):
before, it was always pinned (`owner/slug/N`) and reused its parent's timeout, and a public log
shows such a chain running past the weekly quota ("30.93/30h")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import start_emulator
from tests.support.kaggle import account_on
from worker.boundary.contract import SegmentResult, Timings
from worker.boundary.kernel_options import SelfChain
from worker.kaggle_access.successor import checkpoint_source, quota_left, successor_seconds

GPU = SelfChain(
    "alice", "baton-j1", {}, uses_quota=True, quota_reserve_seconds=100.0, min_session_seconds=5.0
)
CPU = SelfChain("alice", "baton-j1", {})


def _result(fixed: float = 4.0) -> SegmentResult:
    return SegmentResult("j1", 0, "deadline", 0, 10, 60.0, Timings(startup=fixed))


def test_the_checkpoint_is_named_unpinned_where_the_account_refuses_pins() -> None:
    refused, accepted = replace(CPU, pinned_sources=False), replace(CPU, pinned_sources=True)
    assert checkpoint_source("alice/ckpt", 3, refused) == "alice/ckpt"
    assert checkpoint_source("alice/ckpt", 3, accepted) == "alice/ckpt/3"
    assert checkpoint_source("alice/ckpt", 3, CPU) == "alice/ckpt/3"  # not measured


def test_the_successor_is_sized_to_the_quota_the_kernel_reads(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "e", **FAST_EMULATOR, gpu_allowance_seconds=1000) as emulator:
        left = quota_left(account_on(emulator), GPU)
    assert left == 900.0  # 1000 s allowed, nothing used, the job's 100 s reserve kept back
    assert successor_seconds(43200, left, _result(), GPU) == 900
    assert successor_seconds(600, left, _result(), GPU) == 600  # never longer than its parent


def test_no_successor_when_the_quota_left_would_mostly_boot() -> None:
    # 6 s left, and the session's fixed costs were 4 s: under half of it would train.
    assert successor_seconds(43200, 6.0, _result(fixed=4.0), GPU) is None
    assert successor_seconds(43200, 9.0, _result(fixed=4.0), GPU) == 9
    # Plenty of quota: the parent's limit, however short (the orchestrator's rule too).
    assert successor_seconds(6, 900.0, _result(fixed=4.0), GPU) == 6


def test_a_cpu_job_has_no_quota_to_size_to(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "e", **FAST_EMULATOR) as emulator:
        assert quota_left(account_on(emulator), CPU) is None
    assert successor_seconds(600, None, _result(), CPU) == 600
