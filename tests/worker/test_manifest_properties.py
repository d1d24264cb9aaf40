"""Properties of manifest verification (worker/boundary/manifest.py): generated file sets, damage.

The promise: a checkpoint directory verifies exactly when every file is the one the manifest
recorded, and there is no other; any damage to any file set is rejected, never resumed from.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import (
    CorruptCheckpoint,
    StaleCheckpoint,
    verify_checkpoint,
    write_manifest,
)
from worker.boundary.paths import MANIFEST_FILE

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=12).filter(
    lambda name: name not in {".", ".."} and name != MANIFEST_FILE
)
# Relative paths one or two levels deep; a name is never both a file and a directory.
paths = st.lists(names, min_size=1, max_size=2).map("/".join)
file_sets = st.dictionaries(paths, st.binary(max_size=2048), min_size=1, max_size=6).filter(
    lambda files: not any(other.startswith(f"{name}/") for name in files for other in files)
)
identity = st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 1000), st.integers(0, 10**9))

DAMAGE = ["flip", "truncate", "append", "delete", "add", "swap"]


def _committed(root: Path, files: dict[str, bytes], job: str, segment: int, step: int) -> Path:
    directory = root / "checkpoint"
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    write_manifest(directory, job_id=job, segment_index=segment, step=step, model_digest="d")
    return directory


@given(files=file_sets, ident=identity)
def test_an_undamaged_checkpoint_verifies_with_its_own_identity(
    files: dict[str, bytes], ident: tuple[str, int, int]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        directory = _committed(Path(root), files, *ident)
        manifest = verify_checkpoint(directory, CheckpointRef(*ident))
        assert set(manifest.files) == set(files)
        assert manifest.total_bytes == sum(len(data) for data in files.values())


@given(
    files=file_sets,
    ident=identity,
    damage=st.sampled_from(DAMAGE),
    pick=st.integers(min_value=0),
    offset=st.integers(min_value=0),
    extra=names,
)
def test_any_damage_to_any_file_is_rejected(
    files: dict[str, bytes],
    ident: tuple[str, int, int],
    damage: str,
    pick: int,
    offset: int,
    extra: str,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        directory = _committed(Path(root), files, *ident)
        names_on_disk = sorted(files)
        target = directory / names_on_disk[pick % len(names_on_disk)]
        data = target.read_bytes()
        if damage == "flip" and data:
            at = offset % len(data)
            target.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])
        elif damage == "truncate" and data:
            target.write_bytes(data[: offset % len(data)])
        elif damage == "append" or not data:
            target.write_bytes(data + b"\0")
        elif damage == "delete":
            target.unlink()
        elif damage == "add":
            (directory / f"~{extra}").write_bytes(b"left over")  # "~": no generated name
        elif damage == "swap":
            # Another file's (different) contents under this name.
            others = [directory / name for name in names_on_disk if files[name] != data]
            if others:
                target.write_bytes(others[offset % len(others)].read_bytes())
            else:
                target.unlink()
        with pytest.raises(CorruptCheckpoint):
            verify_checkpoint(directory, CheckpointRef(*ident))


@given(files=file_sets, ident=identity, wanted=identity)
def test_a_whole_checkpoint_of_another_job_segment_or_step_is_stale(
    files: dict[str, bytes], ident: tuple[str, int, int], wanted: tuple[str, int, int]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        directory = _committed(Path(root), files, *ident)
        if wanted == ident:
            verify_checkpoint(directory, CheckpointRef(*wanted))
        else:
            with pytest.raises(StaleCheckpoint):
                verify_checkpoint(directory, CheckpointRef(*wanted))
