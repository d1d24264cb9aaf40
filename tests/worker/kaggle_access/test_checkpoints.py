"""Publishing a checkpoint: only a READY version is used; FAILED or DELETED ones are uploaded
again, a bounded number of times; a real permission 403 is a refusal, not "busy"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus

from orchestrator.backends.base import Rejected, Transient
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.kaggle import EXPECT, account_on, committed_checkpoint, publish_until_settled
from worker.boundary.contract import CheckpointRef
from worker.boundary.paths import MANIFEST_FILE
from worker.kaggle_access.checkpoints import (
    MAX_UPLOADS,
    PROCESSING_WITHIN_SECONDS,
    VISIBLE_WITHIN_SECONDS,
    CheckpointDataset,
)
from worker.kaggle_access.client import KaggleAccount

LOST = {"FAILED", "DELETED"}


@pytest.mark.parametrize("status", [s.name for s in DatabundleVersionStatus])
def test_only_a_ready_version_is_used(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, status: str
) -> None:
    emulator.faults.dataset_outcomes = [status] * (MAX_UPLOADS + 1)
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    if status == "READY":
        published = publish_until_settled(dataset, checkpoint)
        assert getattr(published, "version", None) == 1
        return
    if status in LOST:
        refused = publish_until_settled(dataset, checkpoint)
        assert isinstance(refused, Rejected)
        assert f"{MAX_UPLOADS} times" in str(refused)
        versions = emulator.dataset("alice/baton-ckpt-j1").versions
        assert len(versions) == MAX_UPLOADS
        return
    # Still on its way (or stuck there): never used, never uploaded twice.
    for _ in range(15):
        with pytest.raises(Transient):
            dataset.ensure_published(EXPECT, checkpoint)
        time.sleep(0.1)
    dataset_record = emulator.dataset("alice/baton-ckpt-j1")
    assert dataset_record is not None
    assert len(dataset_record.versions) == 1


def test_a_failed_version_is_uploaded_again_and_then_used(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    emulator.faults.dataset_outcomes = ["FAILED"]
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    published = publish_until_settled(dataset, committed_checkpoint(tmp_path / "ckpt"))
    assert getattr(published, "version", None) == 2


def test_publishing_into_someone_elses_dataset_is_a_refusal(
    tmp_path: Path, emulator: Emulator, alice: KaggleAccount
) -> None:
    # alice's dataset is READY; bob may not publish into it: final, never "busy".
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    assert publish_until_settled(dataset, committed_checkpoint(tmp_path / "ckpt")) is not None
    emulator.state.options.users["bob"] = "bob-key"
    intruder = CheckpointDataset(account_on(emulator, "bob", "bob-key"), "x", tmp_path / "bob")
    intruder.owner = "alice"
    intruder.slug = "baton-ckpt-j1"
    other = CheckpointRef("j1", 0, 10)
    with pytest.raises(Rejected):
        intruder.ensure_published(other, committed_checkpoint(tmp_path / "bob-ckpt"))


class _Clock:
    """The publisher's clock, moved by hand (the emulator keeps real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _publish_for(dataset: CheckpointDataset, checkpoint: Path, expect: CheckpointRef) -> str:
    """Ask tick after tick for 3 s of real time; what the last answer said."""
    deadline = time.monotonic() + 3
    while True:
        try:
            return f"published v{dataset.ensure_published(expect, checkpoint).version}"
        except Transient as waiting:
            if time.monotonic() > deadline:
                return f"waiting: {waiting}"
            time.sleep(0.1)


@pytest.mark.parametrize("first_fits", [False, True], ids=["new-dataset-404s", "version-stuck"])
def test_a_full_private_storage_fails_publishing_with_the_reason(
    tmp_path: Path, first_fits: bool
) -> None:
    """Past the private storage limit Kaggle accepts an upload and never finishes it: the
    dataset 404s (kaggle-api #284) or the version stays NOT_YET_PERSISTED (#424). Publishing
    waits out the usual delays, never uploads twice, then refuses with the reason."""
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    size = sum(p.stat().st_size for p in checkpoint.iterdir())
    limit = size * 3 // 2 if first_fits else size // 2
    with start_emulator(
        tmp_path / "emulator", **FAST_EMULATOR, private_storage_bytes=limit
    ) as emulator:
        clock = _Clock()
        dataset = CheckpointDataset(account_on(emulator), "baton-ckpt-j1", tmp_path / "s", clock)
        if first_fits:
            assert _publish_for(dataset, checkpoint, EXPECT) == "published v1"
        second = CheckpointRef("j1", 1, 20)
        later = committed_checkpoint(tmp_path / "ckpt2", second) if first_fits else checkpoint
        expect = second if first_fits else EXPECT
        assert _publish_for(dataset, later, expect).startswith("waiting")
        clock.now += (PROCESSING_WITHIN_SECONDS if first_fits else VISIBLE_WITHIN_SECONDS) + 1
        with pytest.raises(Rejected, match="private dataset storage is full"):
            dataset.ensure_published(expect, later)
        record = emulator.dataset("alice/baton-ckpt-j1")
        assert record is not None
        assert len(record.versions) == (2 if first_fits else 1)  # never uploaded twice
        assert record.versions[-1].stuck is not None
        assert emulator.internal_errors == []


def test_a_checkpoint_whose_files_span_several_pages_is_found_and_listed_whole(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """Kaggle lists a version's files a page at a time (Baton asks for 200): a checkpoint of
    more files is still used once READY, and every one of its files is listed."""
    shards = {f"shard-{index:03d}.bin": b"x" for index in range(250)}
    checkpoint = committed_checkpoint(tmp_path / "ckpt", files=shards)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    published = publish_until_settled(dataset, checkpoint)
    assert getattr(published, "version", None) == 1
    listed = dataset.files(1)
    assert sum(path.endswith(".bin") for path in listed) == 250
    assert any(path.endswith(f"/{MANIFEST_FILE}") for path in listed)
