"""What `baton kaggle check` measured reaches the kernel: the mount looked at first, and the
boot offset as a floor under the session's origin."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from worker.boundary.paths import MANIFEST_FILE
from worker.kaggle_session import find_mounted_checkpoint, session_origin, stage_checkpoint
from worker.proctime import process_start_time

ARCHIVE = "checkpoint-s00000-step10-abc.tar"


def test_a_measured_mount_deeper_than_the_search_is_found(tmp_path: Path) -> None:
    measured = tmp_path / "input" / "a" / "b" / "c" / "d" / "baton-ckpt-j1"
    (measured / "versions" / "3").mkdir(parents=True)
    (measured / "versions" / "3" / ARCHIVE).write_bytes(b"tar")
    assert find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE) is None
    found = find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE, measured)
    assert found == measured / "versions" / "3" / ARCHIVE


def test_the_measured_boot_offset_is_a_floor_under_the_origin() -> None:
    own = process_start_time()
    slack = 0.1  # each reading of /proc converts jiffies to epoch seconds afresh
    assert session_origin() <= own + slack
    assert session_origin(measured_boot_seconds=45.0) <= own - 45.0 + slack
    # An implausible measurement is capped like the live reading.
    assert session_origin(measured_boot_seconds=1e9) >= own - 600.0 - slack


SLUG = "baton-ckpt-j1"


def _put(path: Path, *, unpacked: bool = False) -> Path:
    if unpacked:
        path.mkdir(parents=True)
        (path / MANIFEST_FILE).write_text("{}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"tar")
    return path


def test_the_checkpoint_is_found_in_every_layout_kaggle_mounts_it_in(tmp_path: Path) -> None:
    """input/<slug>/<archive>, the folder Kaggle unpacked it into, input/datasets/<owner>/<slug>
    (newer images), and versions/<N>/ under any of them."""
    layouts = {
        "flat": tmp_path / "1" / SLUG / ARCHIVE,
        "nested": tmp_path / "2" / "datasets" / "alice" / SLUG / ARCHIVE,
        "versioned": tmp_path / "3" / SLUG / "versions" / "2" / ARCHIVE,
    }
    for name, path in layouts.items():
        root = path.parents[len(path.relative_to(tmp_path).parts) - 2]
        assert find_mounted_checkpoint(root, SLUG, ARCHIVE) is None, name
        _put(path)
        assert find_mounted_checkpoint(root, SLUG, ARCHIVE) == path, name
    unpacked = _put(tmp_path / "4" / SLUG / ARCHIVE.removesuffix(".tar"), unpacked=True)
    assert find_mounted_checkpoint(tmp_path / "4", SLUG, ARCHIVE) == unpacked
    # Deeper than input/*/*/*/<slug> is not searched (a measured mount is looked at first).
    _put(tmp_path / "5" / "a" / "b" / "c" / "d" / SLUG / ARCHIVE)
    assert find_mounted_checkpoint(tmp_path / "5", SLUG, ARCHIVE) is None


def test_the_newest_mounted_version_is_looked_at_first(tmp_path: Path) -> None:
    mount = tmp_path / SLUG
    for version in ("2", "10", "9"):
        _put(mount / "versions" / version / ARCHIVE)
    (mount / "versions" / "latest").mkdir()
    assert find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == mount / "versions/10" / ARCHIVE


def test_another_mounted_version_is_handed_over_for_its_manifest_check_to_reject(
    tmp_path: Path,
) -> None:
    """Kaggle served a version without the expected checkpoint: the worker gets the newest one it
    holds, so that its manifest check names the stale checkpoint instead of a missing file."""
    mount = tmp_path / SLUG
    _put(mount / "checkpoint-s00000-step5-aaa.tar")
    newest = _put(mount / "checkpoint-s00001-step8-bbb.tar")
    (mount / "notes.txt").write_text("not a checkpoint")
    assert find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == newest
    assert find_mounted_checkpoint(tmp_path, "another-slug", ARCHIVE) is None


def test_a_mounted_archive_or_folder_is_staged_whole(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / MANIFEST_FILE).write_text('{"step": 3}')
    (source / "sub" / "weights.pt").write_bytes(b"\x00\x01")
    archive = tmp_path / ARCHIVE
    with tarfile.open(archive, "w") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False)
    for mounted, target in ((archive, tmp_path / "from-tar"), (source, tmp_path / "from-dir")):
        stage_checkpoint(mounted, target)
        assert (target / MANIFEST_FILE).read_text() == '{"step": 3}'
        assert (target / "sub" / "weights.pt").read_bytes() == b"\x00\x01"


def test_the_expected_checkpoint_wins_over_another_version_in_the_same_mount(
    tmp_path: Path,
) -> None:
    """Kaggle may mount several checkpoints side by side (or unpack them): the one the segment
    expects is taken, never the newest other one, in the measured mount too."""
    for name, measured in (
        ("searched", None),
        ("measured", tmp_path / "m" / "x" / "y" / "z" / "w"),
    ):
        root = tmp_path / name
        mount = measured / SLUG if measured is not None else root / SLUG
        expected = _put(mount / ARCHIVE.removesuffix(".tar"), unpacked=True)
        _put(mount / "checkpoint-s00001-step20-zzz", unpacked=True)
        found = find_mounted_checkpoint(
            root, SLUG, ARCHIVE, mount if measured is not None else None
        )
        assert found == expected, name


def test_of_several_other_versions_the_newest_is_handed_over(tmp_path: Path) -> None:
    mount = tmp_path / SLUG
    for name in (
        "checkpoint-s00000-step5-a",
        "checkpoint-s00001-step8-b",
        "checkpoint-s00002-step9-c",
    ):
        _put(mount / f"{name}.tar")
    assert (
        find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == mount / "checkpoint-s00002-step9-c.tar"
    )


def test_an_archive_member_that_escapes_the_target_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "payload"
    evil.write_text("outside")
    archive = tmp_path / ARCHIVE
    with tarfile.open(archive, "w") as tar:
        tar.add(evil, arcname="../escaped.txt")
    with pytest.raises(tarfile.FilterError):
        stage_checkpoint(archive, tmp_path / "stage" / "target")
    assert not (tmp_path / "stage" / "escaped.txt").exists()


def test_a_mounted_folder_is_staged_without_a_copy_and_reads_as_its_bytes(tmp_path: Path) -> None:
    # Kaggle's input is read-only and a copy would be a second checkpoint-sized write to the
    # session's disk (issue 18): the stage is a link to the mount, files behind links included.
    source = tmp_path / "source"
    source.mkdir()
    real = tmp_path / "real.pt"
    real.write_bytes(b"weights")
    (source / "weights.pt").symlink_to(real)
    stage_checkpoint(source, tmp_path / "target")
    staged = tmp_path / "target" / "weights.pt"
    assert staged.read_bytes() == b"weights"
    assert (tmp_path / "target").resolve() == source.resolve()
