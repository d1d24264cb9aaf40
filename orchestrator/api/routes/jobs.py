"""/api/v1/jobs: submit, list, inspect and steer training jobs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, ValidationError

from orchestrator import queries, webhooks
from orchestrator.api.deps import ID_PATTERN, MAX_DB_INTEGER, CurrentUser, JobId, ServicesDep
from orchestrator.api.kaggle_fetch import fetching_from_kaggle
from orchestrator.api.links import link
from orchestrator.backends.base import Rejected, Transient
from orchestrator.backends.log_tail import read_from, read_tail
from orchestrator.config import Settings
from orchestrator.lifecycle import (
    ACTIVE_SEGMENT_STATES,
    JobState,
    SegmentState,
    UserAction,
)
from orchestrator.models import KaggleCredential, User
from orchestrator.service import Services
from orchestrator.spec import JobSpec
from orchestrator.trainer_lookup import TrainerRejected
from orchestrator.wire import (
    CheckpointOut,
    EventOut,
    JobList,
    JobOut,
    MetricPoint,
    MoveIn,
    SegmentOut,
)

router = APIRouter(
    prefix="/api/v1/jobs",
    tags=["jobs"],
    responses={401: {"description": "Missing or invalid API token"}},
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such job (or not yours)"}}
_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "The job's state does not allow this action"}
}
# FastAPI answers a body that is not UTF-8 with 400 before validation runs.
_UNREADABLE_BODY: dict[int | str, dict[str, Any]] = {
    400: {"description": "The body could not be read as JSON"}
}
_JOB = "/api/v1/jobs/{job_id}"
NEXT_OFFSET_HEADER = "X-Log-Next-Offset"
ENDED_HEADER = "X-Log-Session-Ended"
_THIS_JOB = {"job_id": "$response.body#/id"}
# Where a job's answer leads: the job's own routes, by the id in the answer.
_JOB_LINKS = {
    "GetJob": link(_JOB, "get", "The job", **_THIS_JOB),
    "CancelJob": link(f"{_JOB}/cancel", "post", "Cancel it", **_THIS_JOB),
    "PauseJob": link(f"{_JOB}/pause", "post", "Pause it", **_THIS_JOB),
    "ResumeJob": link(f"{_JOB}/resume", "post", "Resume it", **_THIS_JOB),
    "ListSegments": link(f"{_JOB}/segments", "get", "Its segments", **_THIS_JOB),
    "SegmentLog": link(f"{_JOB}/segments/{{index}}/log", "get", "A segment's log", **_THIS_JOB),
    "ListEvents": link(f"{_JOB}/events", "get", "Its events", **_THIS_JOB),
    "ListMetrics": link(f"{_JOB}/metrics", "get", "Its metric series", **_THIS_JOB),
    "ListCheckpoints": link(f"{_JOB}/checkpoints", "get", "Its checkpoints", **_THIS_JOB),
}


def _json(answer: BaseModel) -> Response:
    """The answer serialized once, by pydantic. Returned as a model, FastAPI would validate it
    again and encode it in Python, on one more trip through the API's few threads: for the two
    reads every open page repeats, that is a third of their cost (the route's response_model
    still documents the answer)."""
    return Response(answer.model_dump_json(), media_type="application/json")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobOut,
    responses=_UNREADABLE_BODY
    | {
        201: {"links": _JOB_LINKS},
        422: {
            "description": "The spec is invalid: a field breaks its schema, or a rule the "
            "schema cannot state (the trainer must be a worker.Trainer subclass in a package "
            "this server allows; kaggle options need backend kaggle and stored Kaggle "
            "credentials; a session fits its accelerator; the memory planner must fit the model)"
        },
    },
)
def submit_job(spec: JobSpec, user: CurrentUser, services: ServicesDep) -> JobOut:
    try:
        services.trainers.check(spec.trainer)
    except TrainerRejected as exc:
        raise RequestValidationError(
            [{"loc": ("body", "trainer"), "msg": str(exc), "type": "value_error"}]
        ) from exc
    _check_webhook_destinations(spec, services.settings.webhook_networks)
    if spec.kaggle is not None:
        _check_local_fallback(spec.kaggle.model_dump(), services.settings, ("body", "kaggle"))
    if spec.backend == "kaggle":
        with services.db.transaction() as session:
            configured = session.get(KaggleCredential, user.id) is not None
        if not configured:
            raise RequestValidationError(
                [
                    {
                        "loc": ("body", "backend"),
                        "msg": "store your Kaggle credentials first: "
                        "PUT /api/v1/credentials/kaggle",
                        "type": "value_error",
                    }
                ]
            )
    job = services.engine.submit(user.id, spec)
    services.nudge(job)
    with services.db.transaction() as session:
        return queries.get_job(
            session, user.id, job.id, kaggle_quota=services.quota_seen.plan(user.id)
        )


def _check_local_fallback(
    kaggle: dict[str, Any] | None, settings: Settings, loc: tuple[str, ...]
) -> None:
    """`kaggle.on_quota_exhausted: local` runs the job on this machine: the operator decides."""
    if (kaggle or {}).get("on_quota_exhausted") == "local" and not settings.allow_local_fallback:
        raise RequestValidationError(
            [
                {
                    "loc": (*loc, "on_quota_exhausted"),
                    "msg": "this server does not run Kaggle jobs locally when their quota runs "
                    "out (the operator may allow it: BATON_ALLOW_LOCAL_FALLBACK=true)",
                    "type": "value_error",
                }
            ]
        )


def _check_webhook_destinations(spec: JobSpec, allowed: webhooks.Networks) -> None:
    """A webhook at a literal address must be public or allowed (names are checked after
    resolving, at each delivery)."""
    for index, url in enumerate(spec.notify.webhooks if spec.notify else []):
        address = webhooks.literal_address(url)
        if address is not None and not webhooks.destination_allowed(address, allowed):
            raise RequestValidationError(
                [
                    {
                        "loc": ("body", "notify", "webhooks", index),
                        "msg": "webhooks may point at public addresses only "
                        "(the operator may allow networks: BATON_WEBHOOK_ALLOWED_NETWORKS)",
                        "type": "value_error",
                    }
                ]
            )


@router.get("", response_model=JobList)
def list_jobs(
    user: CurrentUser,
    services: ServicesDep,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    cursor: Annotated[
        str | None,
        Query(
            pattern=ID_PATTERN,
            description="the `next_cursor` of the previous page (its last job): the jobs after "
            "it (then `offset`, if given, counts from there)",
        ),
    ] = None,
) -> Response:
    """Your jobs, newest first. Page with `next_cursor` (each page costs the same) or `offset`."""
    with services.db.reading() as session:
        listing = queries.list_jobs(
            session,
            user.id,
            state=state,
            limit=limit,
            offset=offset,
            after=cursor,
            kaggle_quota=services.quota_seen.plan(user.id),
        )
    return _json(listing)


@router.get("/{job_id}", response_model=JobOut, responses=_NOT_FOUND | {200: {"links": _JOB_LINKS}})
def get_job(job_id: JobId, user: CurrentUser, services: ServicesDep) -> Response:
    with services.db.reading() as session:
        job = queries.get_job(
            session, user.id, job_id, kaggle_quota=services.quota_seen.plan(user.id)
        )
    return _json(job)


def _act(job_id: str, user: User, services: ServicesDep, action: UserAction) -> JobOut:
    with services.db.transaction() as session:
        queries.own_job(session, user.id, job_id)
    job = services.engine.act(user.id, job_id, action)
    services.nudge(job)
    with services.db.transaction() as session:
        return queries.get_job(
            session, user.id, job_id, kaggle_quota=services.quota_seen.plan(user.id)
        )


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    responses=_NOT_FOUND | _CONFLICT | {200: {"links": _JOB_LINKS}},
)
def cancel_job(job_id: JobId, user: CurrentUser, services: ServicesDep) -> JobOut:
    """Cancel the job; a running session is killed and its unsaved progress is lost."""
    return _act(job_id, user, services, UserAction.CANCEL)


@router.post(
    "/{job_id}/pause",
    response_model=JobOut,
    responses=_NOT_FOUND | _CONFLICT | {200: {"links": _JOB_LINKS}},
)
def pause_job(job_id: JobId, user: CurrentUser, services: ServicesDep) -> JobOut:
    """Pause; a running segment commits a checkpoint early and the job pauses after it."""
    return _act(job_id, user, services, UserAction.PAUSE)


@router.post(
    "/{job_id}/resume",
    response_model=JobOut,
    responses=_NOT_FOUND | _CONFLICT | {200: {"links": _JOB_LINKS}},
)
def resume_job(job_id: JobId, user: CurrentUser, services: ServicesDep) -> JobOut:
    """Resume a paused job, or retry a failed one from its last checkpoint."""
    return _act(job_id, user, services, UserAction.RESUME)


@router.post(
    "/{job_id}/move",
    response_model=JobOut,
    responses=_NOT_FOUND
    | _CONFLICT
    | _UNREADABLE_BODY
    | {
        200: {"links": _JOB_LINKS},
        503: {"description": "Its checkpoint lies on Kaggle and could not be fetched now"},
    },
)
def move_job(job_id: JobId, body: MoveIn, user: CurrentUser, services: ServicesDep) -> JobOut:
    """Move a paused job to another backend; resume it to continue there from its newest
    checkpoint. A checkpoint whose files stayed on Kaggle is fetched first, every file verified
    (the answer waits for it). 409 unless paused with no session running; 422 for options the
    other backend refuses."""
    with services.db.transaction() as session:
        queries.own_job(session, user.id, job_id)
        configured = session.get(KaggleCredential, user.id) is not None
    if body.backend == "kaggle" and not configured:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "backend"),
                    "msg": "store your Kaggle credentials first: PUT /api/v1/credentials/kaggle",
                    "type": "value_error",
                }
            ]
        )
    if body.backend == "kaggle":
        _check_local_fallback(body.kaggle, services.settings, ("body", "kaggle"))
    try:
        with fetching_from_kaggle("the job's checkpoint"):
            services.engine.move(user.id, job_id, body.backend, body.kaggle)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        ) from exc
    with services.db.transaction() as session:
        return queries.get_job(
            session, user.id, job_id, kaggle_quota=services.quota_seen.plan(user.id)
        )


@router.get("/{job_id}/segments", response_model=list[SegmentOut], responses=_NOT_FOUND)
def list_segments(job_id: JobId, user: CurrentUser, services: ServicesDep) -> list[SegmentOut]:
    with services.db.transaction() as session:
        return queries.list_segments(session, user.id, job_id)


@dataclass(frozen=True)
class SessionLog:
    path: FilePath
    ended: bool  # the session is over: nothing more will be written


def session_log(services: Services, user_id: str, job_id: str, index: int) -> SessionLog:
    """Where segment `index`'s log can be read here; 404 where it cannot."""
    with services.db.transaction() as session:
        job = queries.own_job(session, user_id, job_id)
        segment = queries.find_segment(session, user_id, job_id, index)
        if segment is None or segment.handle is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"segment {index} has no session")
        handle, ended = segment.handle, SegmentState(segment.state) not in ACTIVE_SEGMENT_STATES
    try:
        path = services.engine.backends.for_job(job).log_file(handle)
    except (Rejected, Transient) as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"log unavailable: {exc}") from exc
    if path is None or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"segment {index} has no log here yet")
    return SessionLog(path, ended)


@router.get(
    "/{job_id}/segments/{index}/log",
    response_class=PlainTextResponse,
    responses=_NOT_FOUND
    | {
        200: {
            "content": {"text/plain": {}},
            "headers": {
                NEXT_OFFSET_HEADER: {
                    "description": "with `offset`: the offset to ask from next",
                    "schema": {"type": "integer"},
                },
                ENDED_HEADER: {
                    "description": "`true` once the session is over (no more lines will come)",
                    "schema": {"type": "string"},
                },
            },
        }
    },
)
def segment_log(
    job_id: JobId,
    index: Annotated[int, Path(ge=0, le=10**6)],
    user: CurrentUser,
    services: ServicesDep,
    tail: Annotated[int, Query(ge=1, le=1_000_000, description="last characters")] = 20_000,
    offset: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_DB_INTEGER,
            description="instead of the tail: the whole lines from this byte offset on (up to "
            "1 MiB; ask again from the next offset the answer names)",
        ),
    ] = None,
) -> PlainTextResponse:
    """The segment's session log (local sessions: live; Kaggle: once collected)."""
    log = session_log(services, user.id, job_id, index)
    headers = {ENDED_HEADER: "true" if log.ended else "false"}
    try:
        if offset is None:
            return PlainTextResponse(read_tail(log.path, tail), headers=headers)
        chunk = read_from(log.path, offset, ended=log.ended)
    except OSError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"segment {index} has no log") from exc
    headers[NEXT_OFFSET_HEADER] = str(chunk.next_offset)
    return PlainTextResponse(chunk.text, headers=headers)


@router.get("/{job_id}/events", response_model=list[EventOut], responses=_NOT_FOUND)
def list_events(
    job_id: JobId,
    user: CurrentUser,
    services: ServicesDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_DB_INTEGER, description="only events with a larger id")
    ] = 0,
) -> list[EventOut]:
    with services.db.transaction() as session:
        return queries.list_events(session, user.id, job_id, after=after)


@router.get("/{job_id}/metrics", response_model=list[MetricPoint], responses=_NOT_FOUND)
def list_metrics(job_id: JobId, user: CurrentUser, services: ServicesDep) -> list[MetricPoint]:
    """The metric series of every committed segment, in step order."""
    with services.db.transaction() as session:
        return queries.list_metrics(session, user.id, job_id)


@router.get("/{job_id}/checkpoints", response_model=list[CheckpointOut], responses=_NOT_FOUND)
def list_checkpoints(
    job_id: JobId, user: CurrentUser, services: ServicesDep, include_pruned: bool = False
) -> list[CheckpointOut]:
    """The job's committed checkpoints with their manifests, oldest first: those whose files are
    kept, or with `include_pruned=true` also those retention pruned (`kept: false`)."""
    with services.db.transaction() as session:
        return queries.list_checkpoints(session, user.id, job_id, include_pruned=include_pruned)
