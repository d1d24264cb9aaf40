"""Download a committed checkpoint file by file, resuming partial files, verifying sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orchestrator.cli.client import BatonClient
from orchestrator.cli.errors import CliError
from orchestrator.wire import CheckpointOut
from worker.boundary.paths import MANIFEST_FILE

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_checkpoint(
    client: BatonClient, job_id: str, checkpoint: CheckpointOut, target: Path
) -> None:
    """Every file the manifest lists, then the manifest itself (last, as in a commit)."""
    files: dict[str, dict[str, object]] = checkpoint.manifest.get("files", {})
    for name, entry in sorted(files.items()):
        path = target / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise CliError(f"the manifest names a file outside the checkpoint: {name!r}")
        _fetch(client, job_id, checkpoint.step, name, path, int(str(entry["bytes"])))
        if sha256_of(path) != entry["sha256"]:
            path.unlink()
            raise CliError(f"{name}: sha256 does not match the manifest; removed, run again")
    (target / MANIFEST_FILE).write_text(json.dumps(checkpoint.manifest, indent=2, sort_keys=True))


def _fetch(client: BatonClient, job_id: str, step: int, name: str, path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    have = path.stat().st_size if path.exists() else 0
    if have > size:
        path.unlink()
        have = 0
    if have == size:
        return  # verified by the caller; a wrong file is removed and fetched whole next time
    url = f"/api/v1/jobs/{job_id}/checkpoints/{step}/files/{name}"
    headers = {"Range": f"bytes={have}-"} if have else None
    with client.stream("GET", url, headers=headers) as response:
        # 206: the server resumed from `have`; 200: it sent the whole file.
        mode = "ab" if response.status == 206 else "wb"
        with open(path, mode) as f:
            for chunk in client.chunks(response, _CHUNK):
                f.write(chunk)
