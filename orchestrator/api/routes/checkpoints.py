"""Checkpoint files for download: one file of a committed checkpoint, with HTTP range requests."""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status

from orchestrator import queries
from orchestrator.api.deps import CurrentUser, JobId, ServicesDep, Step
from orchestrator.api.kaggle_fetch import fetching_from_kaggle
from orchestrator.api.open_file_response import OpenFileResponse
from orchestrator.engine import Engine
from worker.boundary.manifest import CorruptCheckpoint
from worker.boundary.paths import MANIFEST_FILE
from worker.boundary.transport import read_remote

router = APIRouter(
    prefix="/api/v1/jobs",
    tags=["checkpoints"],
    responses={401: {"description": "Missing or invalid API token"}},
)
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {}}},
    206: {"description": "Partial content (a Range request)"},
    404: {"description": "No such job (or not yours), checkpoint or file"},
    409: {"description": "The checkpoint's files lie on Kaggle and Kaggle refused them"},
    410: {
        "description": "The checkpoint's files are no longer kept (only the newest are), or "
        "its copy on Kaggle failed verification (the checkpoint is then rejected)"
    },
    416: {"description": "The range is outside the file"},
    503: {"description": "The checkpoint's files lie on Kaggle and could not be fetched now"},
}


@router.get(
    "/{job_id}/checkpoints/{step}/files/{name:path}",
    response_class=OpenFileResponse,
    status_code=200,  # OpenFileResponse picks 200, 206 or 416 itself; this documents the 200
    responses=_RESPONSES,
)
def checkpoint_file(
    job_id: JobId,
    step: Step,
    name: str,
    request: Request,
    user: CurrentUser,
    services: ServicesDep,
) -> OpenFileResponse:
    """A file of the checkpoint at `step`; its sha256 from the manifest is in `X-Checkpoint-Sha256`
    and the ETag. `manifest.json` itself is served too. Supports `Range` to resume a download."""
    return checkpoint_file_response(
        services.engine, user.id, job_id, step, name, request.headers.get("range")
    )


def checkpoint_file_response(
    engine: Engine, user_id: str, job_id: str, step: int, name: str, range_header: str | None
) -> OpenFileResponse:
    """The file, if the job is the user's and the checkpoint's manifest lists it (or is it),
    opened once here: a prune after this point cannot cut the body short. A checkpoint whose
    files stayed on Kaggle (a stub) is fetched first, once, every file verified."""
    with engine.db.transaction() as session:
        checkpoint = queries.find_checkpoint(session, user_id, job_id, step)
        if checkpoint is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no checkpoint at step {step}")
        files: dict[str, Any] = checkpoint.manifest.get("files", {})
        location = FilePath(checkpoint.location)
    # Only names the manifest lists: nothing else under the store is reachable from here.
    if name != MANIFEST_FILE and name not in files:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"the checkpoint has no file {name!r}")
    if name != MANIFEST_FILE:
        _hold(engine, user_id, job_id, step, location)
    path = location / name
    try:
        opened = open(path, "rb")  # noqa: SIM115 -- the response closes it once sent
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise HTTPException(
            status.HTTP_410_GONE, f"the files of step {step} are no longer kept"
        ) from None
    headers = {}
    if name in files:
        digest = str(files[name]["sha256"])
        headers = {"X-Checkpoint-Sha256": digest, "ETag": f'"{digest}"'}
    return OpenFileResponse(opened, path.name, range_header, headers)


def _hold(engine: Engine, user_id: str, job_id: str, step: int, location: FilePath) -> None:
    try:
        if read_remote(location) is None:
            return
        with fetching_from_kaggle(f"the checkpoint at step {step}"):
            engine.hold_checkpoint(user_id, job_id, step)
    except CorruptCheckpoint as exc:
        raise HTTPException(
            status.HTTP_410_GONE, f"the checkpoint at step {step} is unusable: {exc}"
        ) from None
