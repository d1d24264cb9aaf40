"""The web status page (/ui): server-rendered with Jinja2, live through htmx fragments.

It projects the same read layer as the REST API (orchestrator/queries.py); every page, fragment,
action and download is scoped to the signed-in user, and another user's job is a 404.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, Form, HTTPException, Path, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from orchestrator import queries
from orchestrator.api.deps import (
    ID_PATTERN,
    JobId,
    ServicesDep,
    Step,
    client_address,
    refuse_if_throttled,
)
from orchestrator.api.open_file_response import OpenFileResponse
from orchestrator.api.routes.checkpoints import checkpoint_file_response
from orchestrator.api.routes.jobs import session_log
from orchestrator.api.routes.quota import ask_account_quota
from orchestrator.api.ui import charts, log_view
from orchestrator.api.ui.session import (
    COOKIE,
    MAX_AGE_SECONDS,
    SIGNIN_COOKIE,
    SIGNIN_MAX_AGE_SECONDS,
    SignedIn,
    csrf_for,
    csrf_ok,
    end_session,
    new_secret,
    signed_in,
    start_session,
)
from orchestrator.backends.base import BackendError
from orchestrator.backends.log_tail import read_tail
from orchestrator.lifecycle import (
    ACTIVE_SEGMENT_STATES,
    FINISHED_JOB_STATES,
    JobState,
    UserAction,
)
from orchestrator.quota_use import quota_use
from orchestrator.spec import stored_spec
from orchestrator.wire import SegmentOut

HERE = FilePath(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
static = StaticFiles(directory=HERE / "static")

router = APIRouter(prefix="/ui", include_in_schema=False)
root = APIRouter(include_in_schema=False)

FINISHED = frozenset(state.value for state in FINISHED_JOB_STATES)
ACTIVE = frozenset(state.value for state in ACTIVE_SEGMENT_STATES)
# Which buttons a job in each state offers; the engine still decides (409 if it moved on).
ACTIONS: dict[str, tuple[UserAction, ...]] = {
    JobState.QUEUED: (UserAction.PAUSE, UserAction.CANCEL),
    JobState.RUNNING: (UserAction.PAUSE, UserAction.CANCEL),
    JobState.WAITING: (UserAction.PAUSE, UserAction.CANCEL),
    JobState.PAUSED: (UserAction.RESUME, UserAction.CANCEL),
    JobState.FAILED: (UserAction.RESUME,),
}
CONFIRM_TEXT = {
    UserAction.PAUSE: "The running session commits a checkpoint early, then the job pauses.",
    UserAction.RESUME: "The job continues from its last checkpoint.",
    UserAction.CANCEL: "The running session is killed and its unsaved steps are lost. "
    "A cancelled job cannot be resumed.",
}


class SignInRequired(Exception):
    """Raised by page dependencies; answered with a redirect to the sign-in page."""


def _signed_in(request: Request, services: ServicesDep) -> SignedIn:
    found = signed_in(services.db, request.cookies.get(COOKIE))
    if found is None:
        raise SignInRequired
    return found


Viewer = Annotated[SignedIn, Depends(_signed_in)]


def _fragment_viewer(request: Request, services: ServicesDep) -> SignedIn:
    found = signed_in(services.db, request.cookies.get(COOKIE))
    if found is None:
        # htmx follows HX-Redirect; the sign-in page explains itself.
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "sign in first", headers={"HX-Redirect": "/ui/signin"}
        )
    return found


FragmentViewer = Annotated[SignedIn, Depends(_fragment_viewer)]


@root.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui", status.HTTP_303_SEE_OTHER)


def _signin_form(
    request: Request, error: str | None = None, status_code: int = status.HTTP_200_OK
) -> Response:
    """The sign-in page with a fresh sign-in cookie and its CSRF token. `error` is always one of
    this module's own sentences, never text from the request."""
    secret = new_secret()
    response = templates.TemplateResponse(
        request,
        "signin.html",
        {"error": error, "viewer": None, "csrf": csrf_for(secret)},
        status_code=status_code,
    )
    _set_cookie(request, response, SIGNIN_COOKIE, secret, SIGNIN_MAX_AGE_SECONDS, "/ui/signin")
    return response


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int, path: str
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.get("/signin", response_class=HTMLResponse)
def signin_page(request: Request) -> Response:
    return _signin_form(request)


@router.post("/signin", response_class=HTMLResponse)
def signin(
    request: Request,
    services: ServicesDep,
    token: Annotated[str, Form(max_length=512)] = "",
    csrf: Annotated[str, Form(max_length=128)] = "",
) -> Response:
    # A form posted from another site carries no sign-in cookie (SameSite=Strict): refused, so
    # no page elsewhere can sign a visitor in as someone else.
    if not csrf_ok(request.cookies.get(SIGNIN_COOKIE, ""), csrf):
        return _signin_form(
            request, "The sign-in form expired; please try again.", status.HTTP_403_FORBIDDEN
        )
    client = client_address(request)
    refuse_if_throttled(services, client)
    secret = start_session(services.db, token.strip()) if token.strip() else None
    if secret is None:
        services.auth_failures.failed(client)
        return _signin_form(request, "That token is not valid.", status.HTTP_401_UNAUTHORIZED)
    response = RedirectResponse("/ui", status.HTTP_303_SEE_OTHER)
    _set_cookie(request, response, COOKIE, secret, MAX_AGE_SECONDS, "/")
    response.delete_cookie(SIGNIN_COOKIE, path="/ui/signin")
    return response


@router.post("/signout")
def signout(
    request: Request, services: ServicesDep, viewer: Viewer, csrf: Annotated[str, Form()] = ""
) -> Response:
    _check_csrf(request, csrf)
    # The server forgets the session: the cookie, wherever a copy of it is, signs nobody in.
    end_session(services.db, request.cookies.get(COOKIE))
    response = RedirectResponse("/ui/signin", status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/")
    return response


def _check_csrf(request: Request, submitted: str) -> None:
    if not csrf_ok(request.cookies.get(COOKIE, ""), submitted):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form's CSRF token is missing or wrong")


@router.get("", response_class=HTMLResponse)
async def jobs_page(request: Request, services: ServicesDep, viewer: Viewer) -> Response:
    try:
        quotas = await ask_account_quota(services, viewer.user.id)
        quota_problem = None
    except BackendError as exc:
        quotas, quota_problem = [], f"Kaggle quota unavailable: {exc}"
    extra = {"quotas": quotas, "quota_problem": quota_problem}
    # The listing reads the database and renders on a request thread, off the event loop.
    return await to_thread.run_sync(_render_jobs, request, services, viewer, "jobs.html", extra)


@router.get("/fragments/jobs", response_class=HTMLResponse)
def jobs_fragment(request: Request, services: ServicesDep, viewer: FragmentViewer) -> Response:
    return _render_jobs(request, services, viewer, "_jobs_rows.html", {})


def _render_jobs(
    request: Request,
    services: ServicesDep,
    viewer: SignedIn,
    template: str,
    extra: dict[str, Any],
) -> Response:
    context = _jobs_context(services, viewer) | extra
    return templates.TemplateResponse(request, template, context)


def _jobs_context(services: ServicesDep, viewer: SignedIn) -> dict[str, Any]:
    with services.db.transaction() as session:
        listing = queries.list_jobs(
            session,
            viewer.user.id,
            limit=200,
            kaggle_quota=services.quota_seen.plan(viewer.user.id),
        )
    return {"viewer": viewer, "jobs": listing.items, "total": listing.total}


SessionIndex = Annotated[
    int | None, Query(ge=0, le=10**6, description="whose log to show; default: the latest")
]
LogQuery = Annotated[str, Query(max_length=200, description="show only lines containing this")]
MetricKey = Annotated[str, Query(max_length=100, description="which metric the chart shows")]
CompareWith = Annotated[
    str | None, Query(pattern=ID_PATTERN, description="another of your jobs, drawn alongside")
]


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    job_id: JobId,
    request: Request,
    services: ServicesDep,
    viewer: Viewer,
    session: SessionIndex = None,
    q: LogQuery = "",
    metric: MetricKey = "loss",
    compare: CompareWith = None,
) -> Response:
    context = _job_context(services, viewer, job_id, metric, compare)
    context |= _log_context(
        services, viewer, job_id, context["segments"], session, q, job_finished=context["finished"]
    )
    return templates.TemplateResponse(request, "job.html", context)


@router.get("/jobs/{job_id}/log", response_class=HTMLResponse)
def log_fragment(
    job_id: JobId,
    request: Request,
    services: ServicesDep,
    viewer: FragmentViewer,
    session: SessionIndex = None,
    q: LogQuery = "",
) -> Response:
    with services.db.transaction() as db_session:
        finished = queries.own_job(db_session, viewer.user.id, job_id).state in FINISHED
        segments = queries.list_segments(db_session, viewer.user.id, job_id)
    context: dict[str, Any] = {"job": {"id": job_id}}
    context |= _log_context(services, viewer, job_id, segments, session, q, job_finished=finished)
    return templates.TemplateResponse(request, "_job_log.html", context)


@router.get("/jobs/{job_id}/sessions/{index}/log.txt")
def log_download(
    job_id: JobId,
    index: Annotated[int, Path(ge=0, le=10**6)],
    services: ServicesDep,
    viewer: Viewer,
) -> FileResponse:
    log = session_log(services, viewer.user.id, job_id, index)
    return FileResponse(log.path, media_type="text/plain", filename=f"{job_id}-session-{index}.log")


def _log_context(
    services: ServicesDep,
    viewer: SignedIn,
    job_id: str,
    segments: list[SegmentOut],
    chosen: int | None,
    query: str,
    *,
    job_finished: bool,
) -> dict[str, Any]:
    """The log viewer: the chosen session's log end, or the latest session's, followed live."""
    pinned = chosen is not None
    index = chosen if pinned else (segments[-1].index if segments else None)
    segment = next((s for s in segments if s.index == index), None)
    view, problem = None, None
    if segment is not None:
        try:
            log = session_log(services, viewer.user.id, job_id, segment.index)
            text = read_tail(log.path, log_view.SHOWN_CHARS + 1)
        except (HTTPException, OSError):
            problem = "No log here yet." if segment.state in ACTIVE else "This session left no log."
        else:
            truncated = len(text) > log_view.SHOWN_CHARS
            view = log_view.view_log(text, truncated=truncated, query=query.strip())
    return {
        "log": view,
        "log_problem": problem,
        "log_segment": segment,
        "log_pinned": pinned,
        "log_query": query,
        "log_sessions": [s.index for s in segments],
        # Follow while something can still be written: the pinned session, or the job.
        "log_live": (segment is not None and segment.state in ACTIVE)
        or (not pinned and not job_finished),
    }


@router.get("/jobs/{job_id}/live", response_class=HTMLResponse)
def job_fragment(
    job_id: JobId,
    request: Request,
    services: ServicesDep,
    viewer: FragmentViewer,
    metric: MetricKey = "loss",
    compare: CompareWith = None,
) -> Response:
    return templates.TemplateResponse(
        request, "_job_live.html", _job_context(services, viewer, job_id, metric, compare)
    )


def _job_context(
    services: ServicesDep,
    viewer: SignedIn,
    job_id: str,
    metric: str = "loss",
    compare: str | None = None,
) -> dict[str, Any]:
    now = datetime.now(UTC)
    with services.db.transaction() as session:
        job = queries.get_job(
            session,
            viewer.user.id,
            job_id,
            now=now,
            kaggle_quota=services.quota_seen.plan(viewer.user.id),
        )
        segments = queries.list_segments(session, viewer.user.id, job_id)
        metrics = queries.list_metrics(session, viewer.user.id, job_id)
        checkpoints = queries.list_checkpoints(session, viewer.user.id, job_id, include_pruned=True)
        retention_due = (
            job.state == JobState.SUCCEEDED
            and sum(ckpt.kept for ckpt in checkpoints)
            > stored_spec(queries.own_job(session, viewer.user.id, job_id).spec).keep_when_done
        )
        events = queries.list_events(session, viewer.user.id, job_id)
        other = None
        if compare is not None and compare != job_id:
            try:
                other_job = queries.own_job(session, viewer.user.id, compare)
                other = (
                    f"{other_job.name} ({compare})",
                    queries.list_metrics(session, viewer.user.id, compare),
                )
            except queries.JobNotVisible:
                other = None
    live = charts.live_value(job.progress, metric)
    return {
        "viewer": viewer,
        "job": job,
        "segments": segments,
        "timeline": charts.timeline(segments, now, live=job.progress),
        "phases": charts.PHASES,
        "chart": charts.metric_chart(
            metrics, segments, job.total_steps, metric, live=live, compare=other
        ),
        "metric": metric,
        "metric_keys": charts.metric_keys(metrics, job.progress),
        "compare": compare if other else None,
        "compare_unknown": compare is not None and other is None,
        "quota_use": quota_use(segments, now, job.progress),
        "final_metrics": metrics[-1] if metrics else None,
        "duration": _duration(job.started_at or job.created_at, job.finished_at or now),
        "checkpoints": list(reversed(checkpoints)),
        # How each segment's checkpoint reached the next session, and the bytes it put
        # through the orchestrator's link (issue 18).
        "handoffs": {seg.index: seg.timings for seg in segments if seg.timings},
        "events": list(reversed(events))[:100],
        "actions": ACTIONS.get(JobState(job.state), ()),
        "finished": job.state in FINISHED,
        # The live part stops refreshing once nothing on it can change: a succeeded job's
        # retention runs just after its last segment commits, so until the older checkpoints
        # show as pruned it refreshes on.
        "settled": job.state in FINISHED and not retention_due,
        "failure_log": _failure_log(services, viewer, job_id, segments)
        if job.state == JobState.FAILED
        else None,
    }


def _duration(start: datetime, end: datetime) -> str:
    seconds = max(0, round((end - start).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours} h {minutes} min {seconds} s" if hours else f"{minutes} min {seconds} s"


def _failure_log(
    services: ServicesDep, viewer: SignedIn, job_id: str, segments: list[SegmentOut]
) -> str | None:
    """Where a failed job's reason leads: the last session's traceback, or its log."""
    if not segments:
        return None
    index = segments[-1].index
    try:
        log = session_log(services, viewer.user.id, job_id, index)
        text = read_tail(log.path, log_view.SHOWN_CHARS)
    except (HTTPException, OSError):
        return None
    anchor = "traceback" if log_view.TRACEBACK_START in text else "log"
    return f"/ui/jobs/{job_id}?session={index}#{anchor}"


@router.get("/jobs/{job_id}/confirm/{action}", response_class=HTMLResponse)
def confirm_page(
    job_id: JobId, action: UserAction, request: Request, services: ServicesDep, viewer: Viewer
) -> Response:
    with services.db.transaction() as session:
        job = queries.get_job(session, viewer.user.id, job_id)
    context = {"viewer": viewer, "job": job, "action": action, "text": CONFIRM_TEXT[action]}
    return templates.TemplateResponse(request, "confirm.html", context)


@router.post("/jobs/{job_id}/{action}")
def act(
    job_id: JobId,
    action: UserAction,
    request: Request,
    services: ServicesDep,
    viewer: Viewer,
    csrf: Annotated[str, Form()] = "",
) -> Response:
    _check_csrf(request, csrf)
    with services.db.transaction() as session:
        queries.own_job(session, viewer.user.id, job_id)
    services.nudge(services.engine.act(viewer.user.id, job_id, action))
    return RedirectResponse(f"/ui/jobs/{job_id}", status.HTTP_303_SEE_OTHER)


@router.get("/jobs/{job_id}/checkpoints/{step}/files/{name:path}")
def download(
    job_id: JobId, step: Step, name: str, request: Request, services: ServicesDep, viewer: Viewer
) -> OpenFileResponse:
    return checkpoint_file_response(
        services.engine, viewer.user.id, job_id, step, name, request.headers.get("range")
    )
