"""The orchestrator's check of a checkpoint a session published itself (handoff.py), against a
real version on the emulator through the official client: a good copy passes with a few KB
downloaded; a truncated file, a swapped small file, or another checkpoint's archive fails. And
its fetch where the files are needed here (KaggleBackend.fetch_checkpoint): whole and verified,
or refused, the stub left as it was."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.backends.kaggle.backend import KaggleBackend
from orchestrator.backends.kaggle.handoff import SAMPLE_MAX_BYTES, check_published
from orchestrator.spec import KaggleSpec
from tests.kaggle_emulator import Emulator
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Transient
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint, write_manifest
from worker.boundary.paths import RESULT_FILE
from worker.boundary.transport import Published, read_remote, verify_stored, write_stub
from worker.kaggle_access.checkpoints import CheckpointDataset, archive_name
from worker.kaggle_access.client import KaggleAccount

EXPECT = CheckpointRef("j1", 3, 30)


def _checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "big.bin").write_bytes(b"\x01" * (SAMPLE_MAX_BYTES + 10))
    for index in range(4):
        (path / f"small-{index}.json").write_text(f'{{"part": {index}}}')
    write_manifest(path, job_id="j1", segment_index=3, step=30, model_digest="d" * 64)
    return path


def _publish(alice: KaggleAccount, tmp_path: Path) -> tuple[CheckpointDataset, Published, Path]:
    checkpoint = _checkpoint(tmp_path / "ckpt")
    result = tmp_path / RESULT_FILE
    result.write_text("{}")
    dataset = CheckpointDataset(alice, "baton-ckpt-j1-s3", tmp_path / "staging")
    deadline = time.monotonic() + 30
    while True:
        try:
            dataset.ensure_published(EXPECT, checkpoint, result)
            break
        except Transient:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    name = archive_name(EXPECT, checkpoint)
    published = Published(dataset.slug, name, (tmp_path / "staging" / name).stat().st_size, 1.0)
    return dataset, published, checkpoint


def _stored(emulator: Emulator, name: str) -> Path:
    dataset = emulator.dataset("alice/baton-ckpt-j1-s3")
    assert dataset is not None
    [path] = dataset.versions[-1].directory.rglob(name)
    return path


def test_a_good_copy_passes_with_a_sample_of_small_files(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    dataset, published, checkpoint = _publish(alice, tmp_path)
    before = emulator.link_bytes()
    copy, sampled = check_published(dataset, published, checkpoint, EXPECT, tmp_path)
    assert copy.dataset_ref == "alice/baton-ckpt-j1-s3"
    assert 0 < sampled < SAMPLE_MAX_BYTES  # the small files only, never big.bin
    assert emulator.link_bytes() - before == sampled
    # The store keeps a stub: verify_stored accepts it, a worker's verify_checkpoint never does.
    store = tmp_path / "store" / "00003"
    store.parent.mkdir()
    write_stub(store, checkpoint / "manifest.json", copy)
    assert verify_stored(store, EXPECT).step == 30
    with pytest.raises(CorruptCheckpoint):
        verify_checkpoint(store, EXPECT)
    with pytest.raises(CorruptCheckpoint):
        verify_stored(store, CheckpointRef("j1", 3, 31))


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_a_damaged_copy_fails(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, damage: str
) -> None:
    dataset, published, checkpoint = _publish(alice, tmp_path)
    if damage == "truncated":
        big = _stored(emulator, "big.bin")
        big.write_bytes(big.read_bytes()[:-1])
    else:
        # Same size, other bytes, in every small file (so the sample cannot miss it).
        for index in range(4):
            _stored(emulator, f"small-{index}.json").write_text(f'{{"part": {index + 5}}}')
    with pytest.raises(CorruptCheckpoint):
        check_published(dataset, published, checkpoint, EXPECT, tmp_path)


def test_an_archive_not_made_from_this_manifest_fails(alice: KaggleAccount, tmp_path: Path) -> None:
    dataset, published, checkpoint = _publish(alice, tmp_path)
    other = Published(published.dataset_slug, "checkpoint-s00003-step30-000000000000.tar", 1, 1.0)
    with pytest.raises(CorruptCheckpoint, match="not made from this manifest"):
        check_published(dataset, other, checkpoint, EXPECT, tmp_path)


def _stub(alice: KaggleAccount, tmp_path: Path) -> Path:
    """What the orchestrator keeps of the published checkpoint: its stub, in the store."""
    dataset, published, checkpoint = _publish(alice, tmp_path)
    copy, _ = check_published(dataset, published, checkpoint, EXPECT, tmp_path)
    store = tmp_path / "store" / "00003"
    store.parent.mkdir()
    write_stub(store, checkpoint / "manifest.json", copy)
    return store


def test_a_stub_is_fetched_whole_and_verified(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    store = _stub(alice, tmp_path)
    backend = KaggleBackend(alice, "j1", KaggleSpec(), tmp_path / "kaggle" / "j1")
    before = emulator.link_bytes()
    fetched = backend.fetch_checkpoint(store, EXPECT)
    assert fetched > SAMPLE_MAX_BYTES  # big.bin came down this time
    assert emulator.link_bytes() > before  # (zipped on the wire: big.bin is all ones)
    # The store now holds the checkpoint itself: a worker would resume from it.
    assert read_remote(store) is None
    assert verify_checkpoint(store, EXPECT).step == 30
    assert backend.fetch_checkpoint(store, EXPECT) == 0  # held: nothing more to fetch


@pytest.mark.parametrize("damage", ["swapped", "deleted"])
def test_a_copy_that_fails_verification_never_replaces_the_stub(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, damage: str
) -> None:
    store = _stub(alice, tmp_path)
    if damage == "swapped":
        # Same size, other bytes: Kaggle's listing would not notice; the full hash does.
        big = _stored(emulator, "big.bin")
        big.write_bytes(b"\x02" * big.stat().st_size)
    else:
        KaggleBackend(alice, "j1", KaggleSpec(), tmp_path / "kaggle" / "j1").dataset_deleter(
            "baton-ckpt-j1-s3"
        )
    backend = KaggleBackend(alice, "j1", KaggleSpec(), tmp_path / "kaggle" / "j1")
    with pytest.raises(CorruptCheckpoint):
        backend.fetch_checkpoint(store, EXPECT)
    assert read_remote(store) is not None  # still the stub, never a damaged checkpoint
    assert verify_stored(store, EXPECT).step == 30
