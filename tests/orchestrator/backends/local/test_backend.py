"""The local backend hands over only a checkpoint it has verified: a real session runs, then its
output (or the stored copy of it) is damaged before collect."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.base import Collected, LaunchRequest, SessionStatus
from orchestrator.backends.local.backend import LocalBackend
from tests.factories import stop_sessions
from tests.support.marks import starts_processes
from tests.support.segments import make_spec
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE


@pytest.fixture
@starts_processes
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(tmp_path / "sessions", grace_seconds=1)
    stop_sessions(tmp_path / "sessions")


def _finished_session(backend: LocalBackend, timeout: float = 120) -> str:
    handle = backend.launch(LaunchRequest("job-1-0000", make_spec(total_steps=6), None))
    bound = time.monotonic() + timeout
    while backend.status(handle) is not SessionStatus.FINISHED:
        assert time.monotonic() < bound, "the session never finished"
        time.sleep(0.05)
    return handle


def _flip_a_byte(checkpoint: Path) -> None:
    path = checkpoint / "trainer.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _assert_rejected(collected: Collected) -> None:
    assert (collected.manifest, collected.checkpoint) == (None, None)
    assert collected.problem is not None
    assert collected.problem.startswith("checkpoint rejected")


def test_a_clean_session_is_collected_verified(backend: LocalBackend, tmp_path: Path) -> None:
    handle = _finished_session(backend)
    store = tmp_path / "store" / "00000"
    collected = backend.collect(handle, store)
    assert collected.problem is None
    assert collected.checkpoint == store
    assert collected.manifest == verify_checkpoint(store)
    assert collected.manifest.step == 6


def test_a_damaged_session_output_is_rejected(backend: LocalBackend, tmp_path: Path) -> None:
    handle = _finished_session(backend)
    _flip_a_byte(backend.sessions_dir / handle / "working" / CHECKPOINT_DIR)
    _assert_rejected(backend.collect(handle, tmp_path / "store" / "00000"))


def test_a_stored_copy_damaged_before_a_repeated_collect_is_rejected(
    backend: LocalBackend, tmp_path: Path
) -> None:
    # Collect moved the checkpoint into the store, then the orchestrator died before recording
    # it; the next collect finds the stored copy, and must verify it again, not trust it.
    handle = _finished_session(backend)
    store = tmp_path / "store" / "00000"
    assert backend.collect(handle, store).problem is None
    _flip_a_byte(store)
    _assert_rejected(backend.collect(handle, store))


def test_a_checkpoint_that_is_not_the_one_the_result_names_is_rejected(
    backend: LocalBackend, tmp_path: Path
) -> None:
    handle = _finished_session(backend)
    result = backend.sessions_dir / handle / "working" / RESULT_FILE
    # result.json claims step 5; the manifest says step 6.
    result.write_text(result.read_text().replace('"end_step": 6', '"end_step": 5'))
    _assert_rejected(backend.collect(handle, tmp_path / "store" / "00000"))
