"""Checkpoint manifests: the record written last that makes a checkpoint directory exist.

A checkpoint directory without a manifest whose hashes match its files does not exist: every
reader calls `verify_checkpoint` before trusting one. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from worker.boundary.contract import CheckpointRef, fsync_dir
from worker.boundary.paths import MANIFEST_FILE

MANIFEST_VERSION = 1
_CHUNK = 1 << 20


class CorruptCheckpoint(Exception):
    """The directory is not a valid committed checkpoint."""


class StaleCheckpoint(CorruptCheckpoint):
    """A valid checkpoint, but not the one the segment expected to resume from."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Manifest:
    job_id: str
    segment_index: int
    step: int
    model_digest: str
    files: dict[str, FileEntry]
    version: int = MANIFEST_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.files.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        try:
            files = {name: FileEntry(**entry) for name, entry in data["files"].items()}
            return cls(
                job_id=str(data["job_id"]),
                segment_index=int(data["segment_index"]),
                step=int(data["step"]),
                model_digest=str(data["model_digest"]),
                files=files,
                version=int(data.get("version", MANIFEST_VERSION)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptCheckpoint(f"malformed manifest: {exc!r}") from exc

    def check_expected(self, expect: CheckpointRef) -> None:
        found = (self.job_id, self.segment_index, self.step)
        wanted = (expect.job_id, expect.segment_index, expect.step)
        if found != wanted:
            raise StaleCheckpoint(
                "checkpoint is not the expected one: found job/segment/step "
                f"{found}, expected {wanted}"
            )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _data_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)


def write_manifest(
    directory: Path, *, job_id: str, segment_index: int, step: int, model_digest: str
) -> Manifest:
    """Hash every file in `directory`, fsync them, and write manifest.json last."""
    files: dict[str, FileEntry] = {}
    for path in _data_files(directory):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        rel = path.relative_to(directory).as_posix()
        files[rel] = FileEntry(sha256=sha256_file(path), bytes=path.stat().st_size)
    manifest = Manifest(
        job_id=job_id,
        segment_index=segment_index,
        step=step,
        model_digest=model_digest,
        files=files,
    )
    target = directory / MANIFEST_FILE
    with open(target, "w") as f:
        json.dump(manifest.to_dict(), f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(directory)
    return manifest


def read_manifest(directory: Path) -> Manifest:
    """Read the manifest without hashing the files (cheap; use verify_checkpoint to trust it)."""
    path = directory / MANIFEST_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CorruptCheckpoint(f"no manifest in {directory}") from exc
    except (OSError, ValueError) as exc:
        raise CorruptCheckpoint(f"unreadable manifest in {directory}: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptCheckpoint(f"malformed manifest in {directory}")
    return Manifest.from_dict(data)


def verify_checkpoint(directory: Path, expect: CheckpointRef | None = None) -> Manifest:
    """Return the manifest if every listed file is present with the right size and sha256.

    Files on disk that the manifest does not list are rejected too: they are leftovers of an
    interrupted write, not part of the commit.
    """
    if not directory.is_dir():
        raise CorruptCheckpoint(f"no checkpoint directory at {directory}")
    manifest = read_manifest(directory)
    if expect is not None:
        manifest.check_expected(expect)
    on_disk = {p.relative_to(directory).as_posix() for p in _data_files(directory)}
    if on_disk != set(manifest.files):
        extra = sorted(on_disk - set(manifest.files))
        missing = sorted(set(manifest.files) - on_disk)
        raise CorruptCheckpoint(f"files differ from manifest: missing={missing} extra={extra}")
    for name, entry in manifest.files.items():
        path = directory / name
        if path.stat().st_size != entry.bytes or sha256_file(path) != entry.sha256:
            raise CorruptCheckpoint(f"{name} does not match its manifest hash")
    return manifest
