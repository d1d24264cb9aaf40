"""Publishing a checkpoint: only a READY version is used; FAILED or DELETED ones are uploaded
again, a bounded number of times; a real permission 403 is a refusal, not "busy"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus

from orchestrator.backends.base import Rejected, Transient
from tests.kaggle_emulator import Emulator
from tests.orchestrator.backends.kaggle.conftest import account_on
from worker.contract import ExpectedCheckpoint
from worker.kaggle_access.checkpoints import MAX_UPLOADS, CheckpointDataset
from worker.kaggle_access.client import KaggleAccount
from worker.manifest import write_manifest

EXPECT = ExpectedCheckpoint("j1", 0, 10)
LOST = {"FAILED", "DELETED"}


def _checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(b"weights" * 100)
    write_manifest(path, job_id="j1", segment_index=0, step=10, model_digest="d" * 64)
    return path


def _publish_until_settled(dataset: CheckpointDataset, checkpoint: Path) -> object:
    """Ask as the engine does, tick after tick, until publishing returns or is refused."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            return dataset.ensure_published(EXPECT, checkpoint)
        except Transient:
            time.sleep(0.1)
        except Rejected as refused:
            return refused
    return None


@pytest.mark.parametrize("status", [s.name for s in DatabundleVersionStatus])
def test_only_a_ready_version_is_used(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, status: str
) -> None:
    emulator.faults.dataset_outcomes = [status] * (MAX_UPLOADS + 1)
    checkpoint = _checkpoint(tmp_path / "ckpt")
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    if status == "READY":
        published = _publish_until_settled(dataset, checkpoint)
        assert getattr(published, "version", None) == 1
        return
    if status in LOST:
        refused = _publish_until_settled(dataset, checkpoint)
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
    published = _publish_until_settled(dataset, _checkpoint(tmp_path / "ckpt"))
    assert getattr(published, "version", None) == 2


def test_publishing_into_someone_elses_dataset_is_a_refusal(
    tmp_path: Path, emulator: Emulator, alice: KaggleAccount
) -> None:
    # alice's dataset is READY; bob may not publish into it: final, never "busy".
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    assert _publish_until_settled(dataset, _checkpoint(tmp_path / "ckpt")) is not None
    emulator.state.options.users["bob"] = "bob-key"
    intruder = CheckpointDataset(account_on(emulator, "bob", "bob-key"), "x", tmp_path / "bob")
    intruder.owner = "alice"
    intruder.slug = "baton-ckpt-j1"
    other = ExpectedCheckpoint("j1", 0, 10)
    with pytest.raises(Rejected):
        intruder.ensure_published(other, _checkpoint(tmp_path / "bob-ckpt"))
