"""The Kaggle backend under the emulator's fault switches: a status stuck at RUNNING, downloads
that fail, and a downloaded checkpoint that fails verification and is fetched again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.backends.base import SessionStatus, Transient
from orchestrator.backends.kaggle.backend import KaggleBackend, KaggleHandle, kernel_slug
from orchestrator.spec import KaggleSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, FaultKind, ManualClock, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import account_on, script_leaving
from worker.boundary.contract import SegmentResult
from worker.boundary.manifest import write_manifest
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE
from worker.boundary.transport import ORCHESTRATOR
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.kernels import JobKernel, KernelPush

CPU_PUSH = KernelPush(None, 60, False, True, [], [], [], None)
JOB = "j1"
STATE = "state.bin"
SAID = "segment 0 committed step 10"


def _backend(
    account: KaggleAccount, tmp_path: Path, clock: ManualClock | None = None
) -> KaggleBackend:
    options = KaggleSpec.model_validate(kaggle_spec()["kaggle"])
    workdir = tmp_path / "kaggle" / JOB
    if clock is None:
        return KaggleBackend(account, JOB, options, workdir)
    return KaggleBackend(account, JOB, options, workdir, clock=clock.now)


def _committing_script(tmp_path: Path) -> str:
    """A kernel that leaves what a committed segment 0 (steps 0 to 10) leaves in its output."""
    checkpoint = tmp_path / "made" / CHECKPOINT_DIR
    checkpoint.mkdir(parents=True)
    (checkpoint / STATE).write_bytes(bytes(range(256)) * 64)
    write_manifest(checkpoint, job_id=JOB, segment_index=0, step=10, model_digest="d" * 64)
    SegmentResult(JOB, 0, "deadline", 0, 10, 60, model_digest="d" * 64).write(
        tmp_path / "made" / RESULT_FILE
    )
    return script_leaving(tmp_path / "made") + f"print({SAID!r})\n"


def _pushed_and_complete(emulator: Emulator, account: KaggleAccount, tmp_path: Path) -> str:
    kernel = JobKernel(account, kernel_slug(JOB))
    pushed = kernel.push(_committing_script(tmp_path), CPU_PUSH)
    deadline = time.monotonic() + 120  # a hang guard
    while emulator.sessions(kernel.ref)[-1].status is not WorkerStatus.COMPLETE:
        assert time.monotonic() < deadline, emulator.sessions(kernel.ref)
        time.sleep(0.05)
    return KaggleHandle(kernel.ref, 0, pushed.version, JOB, limit_seconds=60).encode()


def _stored_state(emulator: Emulator) -> Path:
    [session] = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    return session.root / "working" / CHECKPOINT_DIR / STATE


def test_a_checkpoint_that_fails_verification_is_downloaded_again(
    emulator: Emulator, tmp_path: Path
) -> None:
    alice = account_on(emulator)
    backend = _backend(alice, tmp_path)
    handle = _pushed_and_complete(emulator, alice, tmp_path)
    good = _stored_state(emulator).read_bytes()
    _stored_state(emulator).write_bytes(b"\0" * len(good))  # what the first download gets
    store = tmp_path / "store" / "00000"
    with pytest.raises(Transient, match="failed verification"):
        backend.collect(handle, store)
    assert not store.exists()

    _stored_state(emulator).write_bytes(good)
    collected = backend.collect(handle, store)
    assert collected.problem is None
    assert collected.manifest is not None
    assert collected.manifest.step == 10
    assert (store / STATE).read_bytes() == good
    assert len(emulator.calls("ListKernelSessionOutput")) == 2


def test_a_checkpoint_that_never_verifies_is_rejected_after_three_downloads(
    emulator: Emulator, tmp_path: Path
) -> None:
    alice = account_on(emulator)
    backend = _backend(alice, tmp_path)
    handle = _pushed_and_complete(emulator, alice, tmp_path)
    _stored_state(emulator).write_bytes(b"rotten")
    store = tmp_path / "store" / "00000"
    for _ in range(2):
        with pytest.raises(Transient):
            backend.collect(handle, store)
    collected = backend.collect(handle, store)
    assert collected.checkpoint is None
    assert (collected.problem or "").startswith("checkpoint rejected:")
    # ...and the session's own result is kept beside the reason: what it did, and when it ended.
    assert collected.result is not None
    assert (collected.result.outcome, collected.result.end_step) == ("deadline", 10)
    assert not store.exists()
    assert len(emulator.calls("ListKernelSessionOutput")) == 3


def test_failing_downloads_are_a_passing_outage_then_the_output_is_collected(
    emulator: Emulator, tmp_path: Path
) -> None:
    alice = account_on(emulator)
    backend = _backend(alice, tmp_path)
    handle = _pushed_and_complete(emulator, alice, tmp_path)
    emulator.faults.on_transfers = True
    emulator.faults.kinds = (FaultKind.SERVER_ERROR,)
    emulator.faults.rate = 1.0
    emulator.faults.methods = frozenset()  # RPCs answer; only the file downloads fail
    store = tmp_path / "store" / "00000"
    with pytest.raises(Transient):
        backend.collect(handle, store)
    assert ("download", FaultKind.SERVER_ERROR) in emulator.faults.injected
    assert not store.exists()

    emulator.faults.rate = 0.0
    collected = backend.collect(handle, store)
    assert collected.problem is None
    assert collected.checkpoint == store


def test_a_collect_asked_again_holds_the_same_checkpoint_and_downloads_nothing_more(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A collect asked again (its answer lost to a restart) reads the checkpoint it holds
    already: verified again, nothing downloaded twice, the output counted once on the
    orchestrator's link; and the log Kaggle kept with the output is where `log_file` says."""
    alice = account_on(emulator)
    backend = _backend(alice, tmp_path)
    handle = _pushed_and_complete(emulator, alice, tmp_path)
    output = sum(p.stat().st_size for p in (tmp_path / "made").rglob("*") if p.is_file())
    store = tmp_path / "store" / "00000"
    store.parent.mkdir()  # the job's store, there already once a segment was collected
    first = backend.collect(handle, store)
    again = backend.collect(handle, store)
    assert first.problem is None
    assert again.problem is None
    assert first.manifest is not None
    assert (again.result, again.manifest, again.checkpoint) == (first.result, first.manifest, store)
    assert again.transport == first.transport == ORCHESTRATOR
    assert len(emulator.calls("ListKernelSessionOutput")) == 1
    # The output crossed the link once; the next launch uploads the checkpoint again.
    upload = first.manifest.total_bytes
    assert (first.link_bytes, again.link_bytes) == (output + upload, upload)
    log = backend.log_file(handle)
    assert log is not None
    assert SAID in log.read_text()


def test_a_status_stuck_at_running_is_bounded_by_the_limit_then_collected(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, clock=clock) as emulator:
        alice = account_on(emulator)
        backend = _backend(alice, tmp_path, clock)
        emulator.faults.stuck_running.add(f"alice/{kernel_slug(JOB)}")
        clock_started = clock.now()
        handle = _pushed_and_waiting(emulator, alice, tmp_path, clock)
        # The session has ended, but Kaggle keeps answering RUNNING (kaggle-cli #473).
        assert backend.status(handle) is SessionStatus.RUNNING
        clock.advance(60 + 899)  # the segment's limit plus the stale margin, nearly
        assert backend.status(handle) is SessionStatus.RUNNING
        clock.advance(2)
        assert backend.status(handle) is SessionStatus.FINISHED
        collected = backend.collect(handle, tmp_path / "store" / "00000")
        assert collected.problem is None
        assert collected.result is not None
        assert collected.result.end_step == 10
        assert clock.now() - clock_started > 900
        assert len(emulator.push_counts) == 1


def _pushed_and_waiting(
    emulator: Emulator, account: KaggleAccount, tmp_path: Path, clock: ManualClock
) -> str:
    kernel = JobKernel(account, kernel_slug(JOB))
    pushed = kernel.push(_committing_script(tmp_path), CPU_PUSH)
    clock.advance(1)  # past the queue time, on the emulator's clock
    deadline = time.monotonic() + 120  # a hang guard
    while emulator.sessions(kernel.ref)[-1].ended_at is None:
        assert time.monotonic() < deadline, emulator.sessions(kernel.ref)
        time.sleep(0.05)
    return KaggleHandle(kernel.ref, 0, pushed.version, JOB, limit_seconds=60).encode()
