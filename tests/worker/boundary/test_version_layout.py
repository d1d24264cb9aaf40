"""How a checkpoint lies in a dataset version (worker/boundary/version_layout.py): every path of a
checkpoint gets a top-level name Kaggle keeps as it is and that reads back as the same path; the
upload is staged without writing the checkpoint's bytes again, on the same filesystem or
another; and a mounted or downloaded version, in any layout Baton ever wrote, becomes the
checkpoint again without a copy."""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.support.kaggle import bytes_written_beside as written
from tests.support.kaggle import committed_checkpoint
from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import MANIFEST_FILE
from worker.boundary.version_layout import (
    MAX_FLAT_FILES,
    checkpoint_stem,
    find_mounted,
    flat_name,
    other_checkpoints,
    pack,
    published_name,
    split_flat,
    stage_mounted,
    stage_upload,
    unpack_version,
)

EXPECT = CheckpointRef("j1", 3, 30)
STEM = "checkpoint-s00003-step30-0123456789ab"
AWKWARD = [
    MANIFEST_FILE,
    "model/weights.safetensors",
    "global_step30/zero_pp_rank_0_mp_rank_00_optim_states.pt",
    "a__b/c_2f.d",
    ".hidden",
    "archive.tar",
    "table.csv",
    "spaces and é/x y.bin",
    "shards/rank-0/optim.pt",  # two folders deep
]


CHECKPOINT_BYTES = 2 << 20
# What staging may write besides the checkpoint: names and links, never its data.
METADATA_BYTES = 64 << 10


def _checkpoint(path: Path) -> Path:
    files = {name: os.urandom(1000 + index) for index, name in enumerate(AWKWARD[1:])}
    files["model/weights.safetensors"] = os.urandom(CHECKPOINT_BYTES)
    return committed_checkpoint(path, EXPECT, files)


def test_every_path_gets_a_top_level_name_of_plain_characters_that_reads_back_as_it() -> None:
    names = [flat_name(STEM, path) for path in AWKWARD]
    assert len(set(names)) == len(AWKWARD)
    for path, name in zip(AWKWARD, names, strict=True):
        # No subfolder for the client to drop, no extension for Kaggle to unpack or convert.
        assert re.fullmatch(r"[A-Za-z0-9_-]+", name), name
        assert split_flat(name) == (STEM, path)


@pytest.mark.parametrize(
    "name",
    [
        f"{STEM}.tar",
        f"{STEM}/model.bin",
        "notes.txt",
        flat_name(STEM, "x").replace("__x", "__"),
        flat_name(STEM, "../escaped"),
        flat_name(STEM, "/etc/passwd"),
        flat_name(STEM, "a//b"),
        flat_name(STEM, "a/./b"),
        f"{STEM}__a_zz",
        f"{STEM}__a.b",
    ],
)
def test_a_name_that_is_not_a_checkpoint_file_inside_the_checkpoint_is_not_read_as_one(
    name: str,
) -> None:
    assert split_flat(name) is None


def test_staging_the_upload_writes_none_of_the_checkpoints_bytes(tmp_path: Path) -> None:
    """The session writes its checkpoint once: the folder the client uploads holds the
    committed files under their top-level names, as links, on this filesystem or another."""
    checkpoint = _checkpoint(tmp_path / "ckpt")
    size = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    name = published_name(EXPECT, checkpoint)
    assert name == checkpoint_stem(EXPECT, checkpoint)
    shm = Path("/dev/shm")
    elsewhere = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else tmp_path))
    try:
        for folder in (tmp_path / "same-filesystem", elsewhere / "upload"):
            staged = stage_upload(checkpoint, name, folder)
            assert sum(staged.values()) == size
            assert written(folder, checkpoint) < METADATA_BYTES, folder
            for entry in folder.iterdir():
                flat = split_flat(entry.name)
                assert flat is not None
                assert entry.read_bytes() == (checkpoint / flat[1]).read_bytes()
    finally:
        for entry in sorted(elsewhere.rglob("*"), reverse=True):
            entry.unlink() if not entry.is_dir() or entry.is_symlink() else entry.rmdir()
        elsewhere.rmdir()
    # Same filesystem: hard links, the very inodes of the committed files.
    weights = checkpoint / "model" / "weights.safetensors"
    assert weights.stat().st_nlink == 2


def test_a_checkpoint_of_more_files_than_a_version_holds_is_staged_as_one_archive(
    tmp_path: Path,
) -> None:
    """The fallback, and its cost: a second copy of the checkpoint while it is uploaded. A
    checkpoint that fits (its manifest and result included) is still published flat."""
    fits = {f"shard-{index:04d}.bin": b"x" for index in range(MAX_FLAT_FILES - 1)}
    full = committed_checkpoint(tmp_path / "fits", EXPECT, fits)
    assert published_name(EXPECT, full) == checkpoint_stem(EXPECT, full)
    shards = {f"shard-{index:04d}.bin": b"x" for index in range(MAX_FLAT_FILES)}
    checkpoint = committed_checkpoint(tmp_path / "ckpt", EXPECT, shards)
    name = published_name(EXPECT, checkpoint)
    assert name == checkpoint_stem(EXPECT, checkpoint) + ".tar"
    staged = stage_upload(checkpoint, name, tmp_path / "upload")
    assert list(staged) == [name]
    assert written(tmp_path / "upload", checkpoint) >= staged[name]
    target = tmp_path / "mounted"
    stage_mounted(find_mounted(tmp_path / "upload", name) or tmp_path, target)
    assert verify_checkpoint(target, EXPECT).files.keys() == shards.keys()


@pytest.mark.parametrize("layout", ["flat", "archive", "unpacked"])
def test_a_mounted_version_in_any_layout_becomes_the_checkpoint_without_a_copy(
    tmp_path: Path, layout: str
) -> None:
    """Flat (what sessions publish), and what Baton published before: an archive, or the folder
    Kaggle unpacked it into. Only an archive is written out again."""
    checkpoint = _checkpoint(tmp_path / "ckpt")
    stem = checkpoint_stem(EXPECT, checkpoint)
    mount = tmp_path / "input" / "baton-ckpt-j1-s3"
    if layout == "flat":
        stage_upload(checkpoint, stem, mount)
    else:
        mount.mkdir(parents=True)
        pack(checkpoint, mount / f"{stem}.tar")
        if layout == "unpacked":
            with tarfile.open(mount / f"{stem}.tar") as archive:
                archive.extractall(mount / stem, filter="data")
            (mount / f"{stem}.tar").unlink()
    if layout == "flat":
        # A file beside it whose name is not one of a checkpoint's flat names is no part of it.
        (mount / f"{stem}__a.b").write_bytes(b"stray")
    # The name the orchestrator hands over: the stem now, the archive's name before.
    for name in (stem, f"{stem}.tar"):
        mounted = find_mounted(mount, name)
        assert mounted is not None, name
        # Where the kernel stages it: input/checkpoint of a session folder made just before.
        session = tmp_path / f"session-{layout}-{name}"
        session.mkdir()
        target = session / "input" / "checkpoint"
        stage_mounted(mounted, target)
        assert verify_checkpoint(target, EXPECT).step == 30
        if layout != "archive":
            assert written(target, mount) < METADATA_BYTES
    assert find_mounted(mount, "checkpoint-s00003-step30-ffffffffffff") is None


def test_of_other_checkpoints_in_a_mount_each_is_named_once_whatever_its_layout(
    tmp_path: Path,
) -> None:
    mount = tmp_path / "mount"
    older = _checkpoint(tmp_path / "older")
    stage_upload(older, checkpoint_stem(EXPECT, older), mount)
    (mount / "checkpoint-s00001-step8-bbbbbbbbbbbb.tar").write_bytes(b"tar")
    (mount / "notes.txt").write_text("not a checkpoint")
    found = other_checkpoints(mount)
    assert len(found) == 2
    # The newest name last, and a flat checkpoint stands as one of its files for staging.
    assert found[-1].name.startswith(checkpoint_stem(EXPECT, older))
    stage_mounted(found[-1], tmp_path / "staged")
    assert verify_checkpoint(tmp_path / "staged", EXPECT).step == 30


@pytest.mark.parametrize("layout", ["flat", "archive", "unpacked"])
def test_a_downloaded_version_is_moved_into_the_checkpoint_in_any_layout(
    tmp_path: Path, layout: str
) -> None:
    checkpoint = _checkpoint(tmp_path / "ckpt")
    stem = checkpoint_stem(EXPECT, checkpoint)
    download = tmp_path / "download"
    if layout == "flat":
        stage_upload(checkpoint, stem, download)
    else:
        download.mkdir()
        pack(checkpoint, download / f"{stem}.tar")
        if layout == "unpacked":
            with tarfile.open(download / f"{stem}.tar") as archive:
                archive.extractall(download / stem, filter="data")
            (download / f"{stem}.tar").unlink()
    (download / "result-s00003.json").write_text("{}")
    unpack_version(download, "checkpoint-s00003-", tmp_path / "target")
    assert verify_checkpoint(tmp_path / "target", EXPECT).step == 30
