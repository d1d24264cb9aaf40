"""How a committed checkpoint crosses a session boundary, and what the orchestrator keeps of one
that never reached its machine.

Two transports (docs/kaggle.md, "Moving checkpoints"):

- `orchestrator`: the orchestrator downloads the session's output and uploads the checkpoint
  again for the next session (every backend's path before; Kaggle's without internet);
- `kernel`: the session publishes its checkpoint where the next session mounts it, before it
  exits, and says where in `PUBLISH_FILE` in its output. The orchestrator then keeps a *stub*:
  the checkpoint's manifest plus `REMOTE_FILE`, naming the published copy. A stub is never a
  checkpoint a worker can resume from: `verify_checkpoint` rejects it (an unlisted file), and
  `verify_stored` accepts it only as a record that the copy was checked where it lies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import (
    CorruptCheckpoint,
    Manifest,
    read_manifest,
    verify_checkpoint,
)
from worker.boundary.paths import MANIFEST_FILE

ORCHESTRATOR = "orchestrator"
KERNEL = "kernel"
# In a session's output: where the session published its checkpoint (a `Published`).
PUBLISH_FILE = "publish.json"
# In the orchestrator's store, beside manifest.json: where the checkpoint's bytes are.
REMOTE_FILE = "remote.json"


@dataclass(frozen=True)
class Published:
    """What a session says it published: a dataset (slug, on the session's own account), the
    name the checkpoint was published under (`archive`: its flat stem, or an archive's name,
    worker/boundary/version_layout.py; the field keeps its first name, which stored records
    use), the checkpoint's bytes uploaded, and how long publishing took in the session."""

    dataset_slug: str
    archive: str
    archive_bytes: int
    seconds: float

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> Published:
        try:
            data = json.loads(path.read_text())
            return cls(
                dataset_slug=str(data["dataset_slug"]),
                archive=str(data["archive"]),
                archive_bytes=int(data["archive_bytes"]),
                seconds=float(data["seconds"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptCheckpoint(f"unusable {PUBLISH_FILE}: {exc!r}") from exc


@dataclass(frozen=True)
class RemoteCopy:
    """Where a checkpoint the orchestrator never held lies: `owner/slug` version `version`,
    the checkpoint published as `archive` (a Kaggle dataset; version_layout names it), checked
    against the manifest whose sha256 it names."""

    dataset_ref: str
    version: int
    archive: str
    manifest_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_stub(store: Path, manifest_file: Path, copy: RemoteCopy) -> None:
    """Keep `manifest_file` and where its checkpoint lies, as the store's copy of it."""
    tmp = store.with_name(store.name + ".stub")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / MANIFEST_FILE).write_bytes(manifest_file.read_bytes())
    (tmp / REMOTE_FILE).write_text(json.dumps(copy.to_dict(), sort_keys=True))
    tmp.replace(store)


def read_remote(directory: Path) -> RemoteCopy | None:
    """The remote copy a stored checkpoint stands for; None for a checkpoint held here."""
    path = directory / REMOTE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return RemoteCopy(
            dataset_ref=str(data["dataset_ref"]),
            version=int(data["version"]),
            archive=str(data["archive"]),
            manifest_sha256=str(data["manifest_sha256"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"unusable {REMOTE_FILE}: {exc!r}") from exc


def verify_stored(directory: Path, expect: CheckpointRef | None = None) -> Manifest:
    """A stored checkpoint: every file hashed when held here; for a stub, its manifest names the
    expected checkpoint and is the one the remote copy was checked against."""
    remote = read_remote(directory) if directory.is_dir() else None
    if remote is None:
        return verify_checkpoint(directory, expect)
    manifest = read_manifest(directory)
    if expect is not None:
        manifest.check_expected(expect)
    if _sha256(directory / MANIFEST_FILE) != remote.manifest_sha256:
        raise CorruptCheckpoint("the stored manifest is not the one the remote copy was checked")
    return manifest
