"""Publishing a checkpoint: only a READY version is used; FAILED or DELETED ones are uploaded
again, a bounded number of times; a real permission 403 is a refusal, not "busy"."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest
from kagglesdk.datasets.types.dataset_api_service import ApiDatasetVersion
from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus

from orchestrator.backends.base import Rejected, Transient
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator
from tests.support.kaggle import (
    EXPECT,
    account_on,
    bytes_written_beside,
    committed_checkpoint,
    publish_until_settled,
)
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Pending
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import CHECKPOINT_DIR, MANIFEST_FILE, RESULT_FILE
from worker.boundary.version_layout import (
    MAX_FLAT_FILES,
    published_name,
    segment_prefix,
    split_flat,
)
from worker.kaggle_access.checkpoints import (
    MAX_UPLOADS,
    PROCESSING_WITHIN_SECONDS,
    VISIBLE_WITHIN_SECONDS,
    CheckpointDataset,
    PublishedCheckpoint,
    result_name,
    upload_folder,
    version_notes,
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


def test_a_checkpoint_that_is_not_the_expected_one_is_refused_before_any_upload(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """Publishing verifies the checkpoint as the job, segment and step it is published for: a
    stale one (committed at another step) is refused, and nothing of it reaches Kaggle."""
    checkpoint = committed_checkpoint(tmp_path / "ckpt")  # j1, segment 0, step 10
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    with pytest.raises(Rejected):
        dataset.ensure_published(CheckpointRef("j1", 0, 20), checkpoint)
    assert emulator.dataset("alice/baton-ckpt-j1") is None


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
        with pytest.raises(Rejected, match="private dataset storage is full") as refused:
            dataset.ensure_published(expect, later)
        # The reason the user reads names the checkpoint, the dataset and how long it waited.
        name = published_name(expect, later)
        minutes = 60 if first_fits else 10
        assert str(refused.value).startswith(
            f"Kaggle accepted {name} for alice/baton-ckpt-j1 {minutes} min ago and has not "
            "made it READY"
        )
        record = emulator.dataset("alice/baton-ckpt-j1")
        assert record is not None
        assert len(record.versions) == (2 if first_fits else 1)  # never uploaded twice
        assert record.versions[-1].stuck is not None
        assert emulator.internal_errors == []


def test_a_first_version_found_processing_without_a_record_is_adopted_never_sent_again(
    tmp_path: Path,
) -> None:
    """A create whose answer was lost, and the record of it too (a restored data dir): the
    job's dataset is there with its first version still processing. Publishing adopts it and
    waits for it, and never sends the checkpoint again (Kaggle would refuse a new version with
    403 until then, and it would be a second copy). Processing takes 10 minutes here, so every
    ask certainly meets it, however slow the machine."""
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    slow = FAST_EMULATOR | {"dataset_processing_seconds": 600.0}
    with start_emulator(tmp_path / "emulator", **slow) as emulator:
        alice = account_on(emulator)
        first = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
        with pytest.raises(Pending):
            first.ensure_published(EXPECT, checkpoint)
        deadline = time.monotonic() + 120  # a hang guard
        while alice.own_dataset("baton-ckpt-j1") is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        restored = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "restored")
        with pytest.raises(Transient) as adopted:
            restored.ensure_published(EXPECT, checkpoint)
        assert str(adopted.value) == (
            "alice/baton-ckpt-j1 exists and is processing its first version: adopting it"
        )
        name = published_name(EXPECT, checkpoint)
        for _ in range(3):
            with pytest.raises(Pending) as waiting:
                restored.ensure_published(EXPECT, checkpoint)
            assert (
                str(waiting.value) == f"{name} was uploaded to alice/baton-ckpt-j1; not READY yet"
            )
        assert restored.upload_confirmed(name)
        record = emulator.dataset("alice/baton-ckpt-j1")
        assert record is not None
        assert len(record.versions) == 1
        assert len(emulator.calls("CreateDataset")) == 1
        assert emulator.calls("CreateDatasetVersion") == []


def test_a_checkpoint_whose_files_span_several_pages_is_found_and_listed_whole(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """Kaggle lists a version's files a page at a time (Baton asks for 200): a checkpoint of
    more files is listed whole once READY, and is then found by that listing and used."""
    shards = {f"shard-{index:03d}.bin": b"x" for index in range(250)}
    checkpoint = committed_checkpoint(tmp_path / "ckpt", files=shards)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    with pytest.raises(Transient):  # sent, every file: Kaggle processes it
        dataset.ensure_published(EXPECT, checkpoint)
    deadline = time.monotonic() + 60
    while not any((v.status or "").upper() == "READY" for v in _versions(alice, "baton-ckpt-j1")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    listed = {split_flat(name) for name in dataset.files(1)}
    paths = {flat[1] for flat in listed if flat is not None}
    assert paths == {*shards, MANIFEST_FILE}
    published = publish_until_settled(dataset, checkpoint)
    assert getattr(published, "version", None) == 1


@pytest.mark.parametrize("unpack", [True, False], ids=["kaggle-unpacks", "archive-kept"])
def test_a_checkpoint_of_more_files_than_a_version_holds_travels_as_one_archive_and_is_found(
    tmp_path: Path, unpack: bool
) -> None:
    """A checkpoint of more files than a flat version may hold is published as one archive,
    sent once, and found again once READY, whether Kaggle unpacked the archive or kept it;
    it then reads back whole."""
    shards = {f"shard-{index:04d}.bin": b"x" for index in range(MAX_FLAT_FILES)}
    checkpoint = committed_checkpoint(tmp_path / "ckpt", files=shards)
    name = published_name(EXPECT, checkpoint)
    assert name.endswith(".tar")
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, unpack_archives=unpack) as emulator:
        dataset = CheckpointDataset(account_on(emulator), "baton-ckpt-j1", tmp_path / "staging")
        published = publish_until_settled(dataset, checkpoint)
        assert published == PublishedCheckpoint(1, name)
        assert publish_until_settled(dataset, checkpoint) == published  # asked again: found
        record = emulator.dataset("alice/baton-ckpt-j1")
        assert record is not None
        assert len(record.versions) == 1
        target = tmp_path / "downloaded"
        dataset.download_segment(1, EXPECT.segment_index, target)
        assert verify_checkpoint(target / CHECKPOINT_DIR, EXPECT).step == EXPECT.step


def _versions(account: KaggleAccount, slug: str) -> list[ApiDatasetVersion]:
    """The dataset's versions as GetDataset lists them (no file listing)."""
    found = account.own_dataset(slug)
    return list(found.versions or []) if found is not None else []


def test_publishing_uploads_the_committed_files_without_writing_them_a_second_time(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """Issue 18's one-copy rule, measured: while the checkpoint is uploaded, the staging folder
    beside it holds links to the committed files and a few small files of its own, not a
    second copy of its bytes (it held a tar of the whole checkpoint before). Kaggle's version
    then holds every file at its committed size, and reads back as the same checkpoint."""
    files = {
        "model/weights.safetensors": os.urandom(8 << 20),
        "optimizer/state.pt": os.urandom(1 << 20),
        "trainer_state.json": b'{"step": 10}',
    }
    checkpoint = committed_checkpoint(tmp_path / "ckpt", files=files)
    size = sum(path.stat().st_size for path in checkpoint.rglob("*") if path.is_file())
    staging = tmp_path / "staging"
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", staging)
    name = published_name(EXPECT, checkpoint)
    with pytest.raises(Transient):  # sent: Kaggle processes it after the session
        dataset.ensure_published(EXPECT, checkpoint)
    assert dataset.upload_confirmed(name)
    assert dataset.staged_bytes(name) == size
    assert bytes_written_beside(staging, checkpoint) < 64 << 10
    published = publish_until_settled(dataset, checkpoint)
    assert getattr(published, "version", None) == 1
    target = tmp_path / "downloaded"
    dataset.download_segment(1, EXPECT.segment_index, target)
    verify_checkpoint(target / CHECKPOINT_DIR, EXPECT)
    for path, content in files.items():
        assert (target / CHECKPOINT_DIR / path).read_bytes() == content


def test_a_staging_cut_midway_is_made_again_whole_and_the_checkpoint_is_sent(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """A process killed while it staged (an orchestrator restarted, a kernel at its limit) leaves
    the half-made folder behind: the next publish makes it again from the checkpoint, never
    fails on it, and sends nothing of the half-made one."""
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    staging = tmp_path / "staging"
    name = published_name(EXPECT, checkpoint)
    half_made = staging / f"{name}.staged.partial"
    half_made.mkdir(parents=True)
    (half_made / "left-by-the-killed-staging.bin").write_bytes(b"x" * 10)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", staging)
    with pytest.raises(Transient):  # sent: Kaggle processes it
        dataset.ensure_published(EXPECT, checkpoint)
    assert dataset.upload_confirmed(name)
    size = sum(path.stat().st_size for path in checkpoint.rglob("*") if path.is_file())
    assert dataset.staged_bytes(name) == size
    assert not [path for path in staging.rglob("left-by-the-killed-staging.bin")]


def _segment(tmp_path: Path, ref: CheckpointRef) -> tuple[Path, Path]:
    """A self-chaining segment's output: its checkpoint (two files whose bytes name the
    segment) and its result."""
    index = ref.segment_index
    files = {"model.bin": bytes([index + 1]) * 700, "optimizer.bin": bytes([index + 7]) * 300}
    checkpoint = committed_checkpoint(tmp_path / f"ckpt-{index}", ref, files=files)
    result = tmp_path / f"result-{index}.json"
    result.write_text(json.dumps({"segment_index": index, "end_step": ref.step}))
    return checkpoint, result


@pytest.mark.parametrize("unpack", [True, False], ids=["kaggle-unpacks", "archive-kept"])
def test_each_self_chained_segment_is_found_in_its_own_version_and_unpacked_whole(
    tmp_path: Path, unpack: bool
) -> None:
    """What the orchestrator collects from a self-chaining job's dataset: each segment from the
    version that carries its checkpoint and result, never a neighbour's; unpacked whole, in
    place of whatever an earlier, interrupted download left, whether Kaggle unpacked the
    archive or kept it."""
    refs = [CheckpointRef("j1", 0, 10), CheckpointRef("j1", 1, 20)]
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, unpack_archives=unpack) as emulator:
        dataset = CheckpointDataset(account_on(emulator), "baton-ckpt-j1", tmp_path / "staging")
        assert dataset.find_segment(0) is None  # no dataset yet
        for version, ref in enumerate(refs, start=1):
            checkpoint, result = _segment(tmp_path, ref)
            published = publish_until_settled(dataset, checkpoint, expect=ref, result=result)
            assert published == PublishedCheckpoint(version, published_name(ref, checkpoint))
        assert dataset.find_segment(2) is None  # not published (yet)
        for version, ref in enumerate(refs, start=1):
            assert dataset.find_segment(ref.segment_index) == version
            target = tmp_path / "collect" / str(ref.segment_index)
            (target / CHECKPOINT_DIR).mkdir(parents=True)
            (target / CHECKPOINT_DIR / "model.bin").write_bytes(b"half a download")
            (target / CHECKPOINT_DIR / "left-over.bin").write_bytes(b"x")
            dataset.download_segment(version, ref.segment_index, target)
            checkpoint = target / CHECKPOINT_DIR
            assert verify_checkpoint(checkpoint, ref).step == ref.step
            assert sorted(path.name for path in checkpoint.iterdir()) == [
                MANIFEST_FILE,
                "model.bin",
                "optimizer.bin",
            ]
            assert (checkpoint / "model.bin").read_bytes() == bytes([ref.segment_index + 1]) * 700
            assert json.loads((target / RESULT_FILE).read_text())["end_step"] == ref.step
            assert sorted(path.name for path in target.parent.iterdir()) == [
                str(index) for index in range(ref.segment_index + 1)
            ]  # nothing of the download left beside it
        assert emulator.internal_errors == []


def test_a_segment_whose_version_still_processes_is_waited_for_and_a_failed_one_never_used(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """A segment's version that Kaggle still processes is "not yet" (Pending), never "not
    published", which would make the orchestrator give the segment's output up; one that
    FAILED is never collected from: its re-upload is."""
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    refs = [CheckpointRef("j1", index, 10 * (index + 1)) for index in range(3)]
    versions = []
    for ref, outcomes in zip(refs[:2], [[], ["FAILED"]], strict=True):
        emulator.faults.dataset_outcomes = outcomes
        checkpoint, result = _segment(tmp_path, ref)
        published = publish_until_settled(dataset, checkpoint, expect=ref, result=result)
        assert isinstance(published, PublishedCheckpoint)
        versions.append(published.version)
    record = emulator.dataset("alice/baton-ckpt-j1")
    assert record is not None
    assert next(v.outcome for v in record.versions if v.number > versions[0]) == "FAILED"
    assert [dataset.find_segment(0), dataset.find_segment(1)] == versions  # its re-upload
    emulator.faults.dataset_outcomes = ["BLOBS_RECEIVED"]  # never leaves processing
    checkpoint, result = _segment(tmp_path, refs[2])
    with pytest.raises(Pending, match="waiting for processing"):
        dataset.ensure_published(refs[2], checkpoint, result)
    stuck = record.versions[-1].number
    assert stuck > versions[1]
    deadline = time.monotonic() + 60  # a hang guard
    while stuck not in [v.version_number for v in _versions(alice, "baton-ckpt-j1")]:
        assert dataset.find_segment(2) is None  # not listed yet: not published yet
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with pytest.raises(Pending, match=f" v{stuck} "):
        dataset.find_segment(2)
    assert [dataset.find_segment(0), dataset.find_segment(1)] == versions


def test_a_session_counts_its_upload_accepted_only_once_kaggle_answered_it(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """A kernel stops waiting for its checkpoint's version once Kaggle has answered the upload
    (Kaggle processes it after the session ends). An upload Kaggle answered with an error is
    not counted, even one that took effect (kaggle-api #424): the kernel keeps asking until its
    deadline, and the orchestrator otherwise fetches the output's copy."""
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    name = published_name(EXPECT, checkpoint)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    assert not dataset.upload_confirmed(name)
    emulator.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)
    with pytest.raises(Transient):
        dataset.ensure_published(EXPECT, checkpoint)
    assert not dataset.upload_confirmed(name)
    other = CheckpointDataset(alice, "baton-ckpt-j2", tmp_path / "staging-2")
    with pytest.raises(Pending, match="waiting for processing"):
        other.ensure_published(EXPECT, checkpoint)
    assert other.upload_confirmed(name)
    assert not other.upload_confirmed(published_name(CheckpointRef("j1", 1, 20), checkpoint))


def test_an_archive_member_that_escapes_its_folder_is_refused_and_nothing_lands_outside(
    tmp_path: Path,
) -> None:
    """Whatever a version on Kaggle holds, collecting it never writes outside the folder it is
    unpacked into: an archive member named `../…` is refused (tarfile's "data" filter)."""
    folder = tmp_path / "crafted"
    folder.mkdir()
    name = f"{segment_prefix(0)}step10-000000000000.tar"
    with tarfile.open(folder / name, "w") as tar:
        for member_name in ["model.bin", "../../escaped.txt"]:
            member = tarfile.TarInfo(member_name)
            member.size = 11
            tar.addfile(member, io.BytesIO(b"not Baton's"))
    (folder / result_name(0)).write_text("{}")
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, unpack_archives=False) as emulator:
        account = account_on(emulator)
        upload_folder(
            account, "alice/baton-ckpt-j1", folder, version_notes(name), exists=False, busy=False
        )
        dataset = CheckpointDataset(account, "baton-ckpt-j1", tmp_path / "staging")
        deadline = time.monotonic() + 120  # a hang guard
        while (version := _found(dataset)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        target = tmp_path / "collect" / "0"
        with pytest.raises(tarfile.OutsideDestinationError):
            dataset.download_segment(version, 0, target)
    assert not list(tmp_path.rglob("escaped.txt"))


def _found(dataset: CheckpointDataset) -> int | None:
    try:
        return dataset.find_segment(0)
    except Transient:
        return None
