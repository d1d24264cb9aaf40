"""The orchestrator's check of a checkpoint a session published itself (handoff.py), against a
real version on the emulator through the official client: a good copy passes with a few KB
downloaded; a truncated file, a swapped small file, or another checkpoint's archive fails. And
its fetch where the files are needed here (KaggleBackend.fetch_checkpoint): whole and verified,
or refused, the stub left as it was."""

from __future__ import annotations

import hashlib
import random
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.backends.kaggle import handoff
from orchestrator.backends.kaggle.backend import DOWNLOAD_ATTEMPTS, KaggleBackend
from orchestrator.backends.kaggle.handoff import SAMPLE_MAX_BYTES, check_published
from orchestrator.spec import KaggleSpec
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.kaggle import account_on
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Pending, Transient
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint, write_manifest
from worker.boundary.paths import MANIFEST_FILE, RESULT_FILE
from worker.boundary.transport import (
    Published,
    RemoteCopy,
    read_remote,
    verify_stored,
    write_stub,
)
from worker.boundary.version_layout import checkpoint_stem, pack, published_name, split_flat
from worker.kaggle_access.checkpoints import (
    PROCESSING_WITHIN_SECONDS,
    VISIBLE_WITHIN_SECONDS,
    CheckpointDataset,
    result_name,
    upload_folder,
    version_notes,
)
from worker.kaggle_access.client import KaggleAccount

EXPECT = CheckpointRef("j1", 3, 30)


def _checkpoint(path: Path, small: list[bytes] | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "big.bin").write_bytes(b"\x01" * (SAMPLE_MAX_BYTES + 10))
    for index, content in enumerate(small or [f'{{"part": {i}}}'.encode() for i in range(4)]):
        (path / f"small-{index}.json").write_bytes(content)
    write_manifest(path, job_id="j1", segment_index=3, step=30, model_digest="d" * 64)
    return path


def _publish(
    alice: KaggleAccount, tmp_path: Path, small: list[bytes] | None = None
) -> tuple[CheckpointDataset, Published, Path]:
    checkpoint = _checkpoint(tmp_path / "ckpt", small)
    result = tmp_path / RESULT_FILE
    result.write_text("{}")
    dataset = CheckpointDataset(alice, "baton-ckpt-j1-s3", tmp_path / "staging")
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        try:
            dataset.ensure_published(EXPECT, checkpoint, result)
            break
        except Transient:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    name = published_name(EXPECT, checkpoint)
    published = Published(dataset.slug, name, dataset.staged_bytes(name), 1.0)
    return dataset, published, checkpoint


def _publish_archive(
    alice: KaggleAccount, tmp_path: Path
) -> tuple[CheckpointDataset, Published, Path]:
    """A version holding the checkpoint as one `.tar`: what Baton published before the flat
    layout, and still publishes for a checkpoint of more files than a version holds."""
    checkpoint = _checkpoint(tmp_path / "ckpt")
    archive = checkpoint_stem(EXPECT, checkpoint) + ".tar"
    folder = tmp_path / "archive-upload"
    folder.mkdir()
    size = pack(checkpoint, folder / archive)
    (folder / result_name(EXPECT.segment_index)).write_text("{}")
    ref = "alice/baton-ckpt-j1-s3"
    upload_folder(alice, ref, folder, version_notes(archive), exists=False, busy=False)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1-s3", tmp_path / "staging")
    return dataset, Published(dataset.slug, archive, size, 1.0), checkpoint


def _ready(
    dataset: CheckpointDataset, published: Published, checkpoint: Path, tmp_path: Path
) -> tuple[RemoteCopy, int]:
    """The check of a copy just uploaded, once Kaggle has processed it."""
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        try:
            return check_published(dataset, published, checkpoint, EXPECT, tmp_path)
        except Transient:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _stored(emulator: Emulator, name: str) -> Path:
    """Kaggle's stored copy of the checkpoint's file `name`, in whichever layout it lies."""
    dataset = emulator.dataset("alice/baton-ckpt-j1-s3")
    assert dataset is not None
    [path] = [
        path
        for path in dataset.versions[-1].directory.rglob("*")
        if path.name == name or (split_flat(path.name) or ("", ""))[1] == name
    ]
    return path


def test_a_good_copy_passes_with_a_sample_of_small_files(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    dataset, published, checkpoint = _publish(alice, tmp_path)
    before = emulator.link_bytes()
    copy, sampled = check_published(dataset, published, checkpoint, EXPECT, tmp_path)
    # What the next session mounts and the download verifies against: this very checkpoint.
    manifest_sha256 = hashlib.sha256((checkpoint / MANIFEST_FILE).read_bytes()).hexdigest()
    assert copy == RemoteCopy("alice/baton-ckpt-j1-s3", 1, published.archive, manifest_sha256)
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


def test_every_check_of_a_copy_downloads_the_same_sample(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """The sample is drawn from the manifest, never anew: a retried check reads the same files,
    so a copy whose damage the sample catches fails every retry rather than passing one by
    luck. (Ten small files, each twice the size of the one before: the bytes downloaded name
    the files drawn.)"""
    small = [random.Random(index).randbytes(16 << index) for index in range(10)]
    dataset, published, checkpoint = _publish(alice, tmp_path, small)
    drawn = set()
    for _ in range(3):
        before = emulator.link_bytes()
        _, sampled = check_published(dataset, published, checkpoint, EXPECT, tmp_path)
        assert emulator.link_bytes() - before == sampled
        drawn.add(sampled)
    assert len(drawn) == 1


@pytest.mark.parametrize("damage", ["truncated", "swapped", "manifest-missing"])
def test_a_damaged_copy_fails(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, damage: str
) -> None:
    dataset, published, checkpoint = _publish(alice, tmp_path)
    if damage == "truncated":
        big = _stored(emulator, "big.bin")
        big.write_bytes(big.read_bytes()[:-1])
    elif damage == "manifest-missing":
        _stored(emulator, MANIFEST_FILE).unlink()
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


def test_a_copy_published_from_another_commit_of_the_same_step_fails(
    alice: KaggleAccount, tmp_path: Path
) -> None:
    """The published name carries the hash of the manifest it was made from: a copy of another
    commit of the same job, segment and step (a retried session's) is refused by that name."""
    dataset, published, _ = _publish(alice, tmp_path)
    other = _checkpoint(tmp_path / "other", [b'{"part": "another commit"}'])
    with pytest.raises(CorruptCheckpoint, match="not made from this manifest"):
        check_published(dataset, published, other, EXPECT, tmp_path)


def test_where_kaggle_keeps_the_archive_its_exact_size_is_checked(tmp_path: Path) -> None:
    """Where Kaggle keeps the archive instead of unpacking it, its listing of the archive is
    the check: the exact size passes with nothing downloaded, one byte short fails."""
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, unpack_archives=False) as emulator:
        dataset, published, checkpoint = _publish_archive(account_on(emulator), tmp_path)
        _ready(dataset, published, checkpoint, tmp_path)
        before = emulator.link_bytes()
        copy, sampled = check_published(dataset, published, checkpoint, EXPECT, tmp_path)
        assert (copy.dataset_ref, copy.version, copy.archive, sampled) == (
            "alice/baton-ckpt-j1-s3",
            1,
            published.archive,
            0,
        )
        assert emulator.link_bytes() == before
        archive = _stored(emulator, published.archive)
        archive.write_bytes(archive.read_bytes()[:-1])
        with pytest.raises(CorruptCheckpoint, match=f"{published.archive_bytes - 1} bytes"):
            check_published(dataset, published, checkpoint, EXPECT, tmp_path)


def test_a_version_that_never_appears_is_waited_for_then_given_up(
    alice: KaggleAccount, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session says it published segment 3, but no READY version holds it (Kaggle drops an
    upload silently past the storage limit, kaggle-api #284). The orchestrator waits while a
    version may still appear and be processed, counted from its first look, even though every
    fetch empties its folder; then it gives the published copy up (CorruptCheckpoint: the
    backend then fetches the output's own copy)."""
    checkpoint = _checkpoint(tmp_path / "ckpt")
    published = Published("baton-ckpt-j1-s3", published_name(EXPECT, checkpoint), 10_000, 1.0)
    dataset = CheckpointDataset(alice, "baton-ckpt-j1-s3", tmp_path / "staging")
    first_look = time.time()
    now = [first_look]
    monkeypatch.setattr(handoff, "time", SimpleNamespace(time=lambda: now[0]))
    scratch = tmp_path / "fetched"
    bound = VISIBLE_WITHIN_SECONDS + PROCESSING_WITHIN_SECONDS
    for later in [0.0, 60.0, bound - 1]:
        now[0] = first_look + later
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        with pytest.raises(Pending, match="no READY version with segment 3 yet"):
            check_published(dataset, published, checkpoint, EXPECT, scratch)
    now[0] = first_look + bound
    with pytest.raises(CorruptCheckpoint, match="no READY version of alice/baton-ckpt-j1-s3"):
        check_published(dataset, published, checkpoint, EXPECT, scratch)


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
    before = len(emulator.calls("DownloadDataset"))
    with pytest.raises(CorruptCheckpoint):
        backend.fetch_checkpoint(store, EXPECT)
    assert read_remote(store) is not None  # still the stub, never a damaged checkpoint
    assert verify_stored(store, EXPECT).step == 30
    # A copy that fails verification is fetched again (a download can come back damaged);
    # one that is gone is not.
    tries = len(emulator.calls("DownloadDataset")) - before
    assert tries == (DOWNLOAD_ATTEMPTS if damage == "swapped" else 1)
    assert not (tmp_path / "kaggle" / "j1" / "fetch" / store.name).exists()  # nothing left over


def test_a_checkpoint_published_as_one_archive_before_the_flat_layout_is_still_read(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """A job published before the flat layout left its checkpoints as one `.tar` per version
    (which Kaggle unpacks): the orchestrator's check still passes it, on a sample, and its
    fetch still brings it down whole and verified."""
    dataset, published, checkpoint = _publish_archive(alice, tmp_path)
    archive = published.archive
    copy, sampled = _ready(dataset, published, checkpoint, tmp_path)
    assert (copy.archive, copy.version) == (archive, 1)
    assert 0 < sampled < SAMPLE_MAX_BYTES
    store = tmp_path / "store" / "00003"
    store.parent.mkdir()
    write_stub(store, checkpoint / "manifest.json", copy)
    backend = KaggleBackend(alice, "j1", KaggleSpec(), tmp_path / "kaggle" / "j1")
    assert backend.fetch_checkpoint(store, EXPECT) > SAMPLE_MAX_BYTES
    assert verify_checkpoint(store, EXPECT).step == 30
