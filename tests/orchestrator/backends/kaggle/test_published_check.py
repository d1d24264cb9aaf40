"""The orchestrator's check of a checkpoint a session published itself (handoff.py), against a
real version on the emulator through the official client: a good copy passes with a few KB
downloaded; a truncated file, a swapped small file, or another checkpoint's archive fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.backends.kaggle.handoff import SAMPLE_MAX_BYTES, check_published
from tests.kaggle_emulator import Emulator
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Transient
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint, write_manifest
from worker.boundary.paths import RESULT_FILE
from worker.boundary.transport import Published, verify_stored, write_stub
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
