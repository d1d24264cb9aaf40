"""How a checkpoint lies in a dataset version: the one owner of its names there (issue 18).

A version carries one checkpoint under a *stem* that names it exactly, its segment, step and
the sha256 of its manifest (`checkpoint-s00003-step120-<sha256[:12]>`), in one of three layouts:

- **flat** (what Baton writes): every file of the checkpoint at the version's top level, named
  `<stem>__<its path in the checkpoint, escaped>`. The official client uploads a folder's files
  one by one, streaming each from its path (kaggle 2.2.4 `upload_files`: `dir_mode="skip"`
  drops subfolders; only `zip`/`tar` would write an archive to a temporary folder), so the
  writer links the committed files into a staging folder under these names (`stage_upload`):
  the checkpoint is written once, never copied. The escape keeps `A-Z a-z 0-9 -` and writes
  every other byte as `_xx` (hex), `.` and `/` included: a flat name has no dot, so Kaggle sees
  no extension to act on (it unpacks .zip/.tar uploads and converts tables), and `__` never
  occurs in an escaped path, so the stem ends at the first `__`. Names of these characters are
  kept as uploaded (wheels in datasets are installed by their exact file names).
- **archive** (`<stem>.tar`): what Baton wrote before, and still writes for a checkpoint of more
  than `MAX_FLAT_FILES` files (a version holds at most 1000): that one costs a second copy of
  the checkpoint on the writer's disk while it is uploaded.
- **unpacked** (`<stem>/<path>`): an archive Kaggle unpacked.

Every reader goes through here: the next session's mount (`find_mounted`, `stage_mounted`:
links, never copies, except a mounted archive, which is unpacked), the orchestrator's check of a
version's listing (`listing_layout`, `flat_name`), a download of a whole version (`unflatten`)
and the writer's idempotent re-publish (`listings`). Standard library only.
"""

from __future__ import annotations

import errno
import re
import tarfile
from pathlib import Path

from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import sha256_file
from worker.boundary.paths import CHECKPOINT_DIR, MANIFEST_FILE

SEPARATOR = "__"
TAR_SUFFIX = ".tar"
# Kaggle's 1000 files per version, less the segment's result file that travels with it and one
# to spare. A checkpoint with more files is published as one archive.
MAX_FLAT_FILES = 998
_KEPT = re.compile(r"[A-Za-z0-9-]")
_FLAT_PATH = re.compile(r"(?:[A-Za-z0-9-]|_[0-9a-f]{2})+")
# A hard link that cannot be made for these reasons is made a symbolic link instead: another
# filesystem, one that has no hard links, or a file with too many links already.
_NO_HARD_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP}


def segment_prefix(segment_index: int) -> str:
    """What every name of a segment's checkpoint starts with, in every layout."""
    return f"{CHECKPOINT_DIR}-s{segment_index:05d}-"


def checkpoint_stem(expect: CheckpointRef, checkpoint_dir: Path) -> str:
    """Names the exact checkpoint: its segment, step and the hash of its manifest."""
    manifest = sha256_file(checkpoint_dir / MANIFEST_FILE)[:12]
    return f"{segment_prefix(expect.segment_index)}step{expect.step}-{manifest}"


def stem_of(name: str) -> str:
    """The stem a published name carries: the name itself (flat) or its archive's."""
    return name.removesuffix(TAR_SUFFIX)


def checkpoint_files(checkpoint_dir: Path) -> dict[str, Path]:
    """Every file of the checkpoint, its manifest included, by its path in it."""
    return {
        path.relative_to(checkpoint_dir).as_posix(): path
        for path in sorted(checkpoint_dir.rglob("*"))
        if path.is_file()
    }


def published_name(expect: CheckpointRef, checkpoint_dir: Path) -> str:
    """The name the checkpoint is published under: its stem (flat), or `<stem>.tar` where it has
    too many files for one version."""
    stem = checkpoint_stem(expect, checkpoint_dir)
    if len(checkpoint_files(checkpoint_dir)) > MAX_FLAT_FILES:
        return stem + TAR_SUFFIX
    return stem


def flat_name(stem: str, path: str) -> str:
    """The top-level name of the checkpoint's file `path` (posix, relative) in a flat version."""
    escaped = "".join(
        char if _KEPT.fullmatch(char) else "".join(f"_{b:02x}" for b in char.encode())
        for char in path
    )
    return f"{stem}{SEPARATOR}{escaped}"


def split_flat(name: str) -> tuple[str, str] | None:
    """(stem, path in the checkpoint) of a flat name; None for any other name, or for one whose
    path would leave the checkpoint (absolute, or with a `.` or `..` part)."""
    stem, separator, escaped = name.partition(SEPARATOR)
    if not separator or not _FLAT_PATH.fullmatch(escaped):
        return None
    raw = bytearray()
    index = 0
    while index < len(escaped):
        if escaped[index] == "_":
            raw.append(int(escaped[index + 1 : index + 3], 16))
            index += 3
        else:
            raw += escaped[index].encode()
            index += 1
    try:
        path = raw.decode()
    except UnicodeDecodeError:
        return None
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return stem, path


def listings(stem: str, sizes: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """What a version holding this checkpoint lists (name -> bytes), with the name it is
    published under: flat, or the archive Kaggle unpacked. (An archive that stayed packed is
    known by its size, which only its writer has.)"""
    return [
        (stem, {flat_name(stem, path): size for path, size in sizes.items()}),
        (stem + TAR_SUFFIX, {f"{stem}/{path}": size for path, size in sizes.items()}),
    ]


def listing_layout(name: str, files: set[str]) -> str | None:
    """How a version's listing holds the checkpoint published as `name`: `archive`, `flat`,
    `unpacked`, or None where it holds no part of it."""
    stem = stem_of(name)
    if stem + TAR_SUFFIX in files:
        return "archive"
    if flat_name(stem, MANIFEST_FILE) in files:
        return "flat"
    if f"{stem}/{MANIFEST_FILE}" in files:
        return "unpacked"
    return None


def listed_name(stem: str, path: str, layout: str) -> str:
    """The version's name of the checkpoint's file `path`, flat or unpacked."""
    return flat_name(stem, path) if layout == "flat" else f"{stem}/{path}"


def link(source: Path, target: Path) -> None:
    """`target` as another name of `source`, writing none of its bytes: a hard link, or a
    symbolic link where the filesystem cannot make one (another filesystem, for one)."""
    try:
        target.hardlink_to(source)
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINK:
            raise
        target.symlink_to(source.resolve())


def pack(checkpoint_dir: Path, archive: Path) -> int:
    """Tar the checkpoint directory (uncompressed: weights do not compress); returns its size."""
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for path, file in checkpoint_files(checkpoint_dir).items():
            tar.add(file, arcname=path)
    tmp.replace(archive)
    return archive.stat().st_size


def stage_upload(checkpoint_dir: Path, name: str, folder: Path) -> dict[str, int]:
    """Put the checkpoint published as `name` into `folder` (new, on any filesystem) the way
    the official client uploads a folder: its files linked under their flat names, or one
    archive where `name` is one. What the version will list: name -> bytes."""
    folder.mkdir(parents=True)
    if name.endswith(TAR_SUFFIX):
        return {name: pack(checkpoint_dir, folder / name)}
    staged = {}
    for path, file in checkpoint_files(checkpoint_dir).items():
        flat = flat_name(name, path)
        link(file, folder / flat)
        staged[flat] = file.stat().st_size
    return staged


def find_mounted(mount: Path, name: str) -> Path | None:
    """The checkpoint published as `name` in a mounted version, in whichever layout it lies: the
    archive, the folder Kaggle unpacked it into, or its flat manifest (which stands for the
    whole flat checkpoint in `stage_mounted`)."""
    stem = stem_of(name)
    for candidate in (mount / (stem + TAR_SUFFIX), mount / flat_name(stem, MANIFEST_FILE)):
        if candidate.is_file():
            return candidate
    if (mount / stem / MANIFEST_FILE).is_file():
        return mount / stem
    return None


def other_checkpoints(mount: Path) -> list[Path]:
    """Every checkpoint a mounted version holds, in any layout, oldest name first."""
    found: dict[str, Path] = {}
    for entry in sorted(mount.glob(f"{CHECKPOINT_DIR}-s*")):
        flat = split_flat(entry.name)
        stem = flat[0] if flat is not None else stem_of(entry.name)
        found.setdefault(stem, entry)
    return [found[stem] for stem in sorted(found)]


def stage_mounted(mounted: Path, target: Path) -> None:
    """Put a mounted checkpoint at `target` without copying it: a folder Kaggle unpacked is
    linked, a flat one becomes a folder of links to its files (the mount is read-only and often
    another filesystem; the worker only reads it). A mounted archive is unpacked."""
    flat = split_flat(mounted.name) if mounted.is_file() else None
    if flat is not None:
        target.mkdir(parents=True)
        for path, file in _flat_members(mounted.parent, flat[0]).items():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).symlink_to(file.resolve())
    elif mounted.is_file():
        target.mkdir(parents=True)
        with tarfile.open(mounted) as archive:
            archive.extractall(target, filter="data")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(mounted.resolve(), target_is_directory=True)


def unpack_version(folder: Path, prefix: str, target: Path) -> None:
    """Put the checkpoint whose names start with `prefix`, from a whole version downloaded into
    `folder`, at `target`, whichever layout it lies in: flat files and an unpacked folder are
    moved there (renamed, not copied), an archive is unpacked."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(folder.rglob(f"{prefix}*")):
        flat = split_flat(entry.name)
        if entry.is_file() and flat is not None:
            _move(entry, target / flat[1])
        elif entry.is_file() and entry.name.endswith(TAR_SUFFIX):
            with tarfile.open(entry) as archive:
                archive.extractall(target, filter="data")
        elif entry.is_dir():
            for file in sorted(p for p in entry.rglob("*") if p.is_file()):
                _move(file, target / file.relative_to(entry))


def _move(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    source.replace(destination)


def _flat_members(folder: Path, stem: str) -> dict[str, Path]:
    members = {}
    for entry in folder.glob(f"{stem}{SEPARATOR}*"):
        flat = split_flat(entry.name)
        if flat is not None and flat[0] == stem and entry.is_file():
            members[flat[1]] = entry
    return members
