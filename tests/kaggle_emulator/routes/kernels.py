"""kernels.KernelsApiService: push, status, output listing and download, cancel, get, list."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.kaggle_emulator import wire
from tests.kaggle_emulator.errors import bad_request, forbidden, not_found
from tests.kaggle_emulator.kernel_sessions import KernelSession, WorkerStatus
from tests.kaggle_emulator.kernels import Kernel, PushRequest
from tests.kaggle_emulator.paging import page
from tests.kaggle_emulator.routes import fields
from tests.kaggle_emulator.routes.fields import Body
from tests.kaggle_emulator.routes.responses import Handler, Redirect, Reply
from tests.kaggle_emulator.state import CallContext, EmulatorState

SERVICE = "kernels.KernelsApiService"


def _push_request(body: Body) -> PushRequest:
    return PushRequest(
        slug=fields.text(body, "slug"),
        kernel_id=fields.integer(body, "id"),
        title=fields.text(body, "newTitle"),
        text=fields.text(body, "text") or "",
        language=fields.text(body, "language"),
        kernel_type=fields.text(body, "kernelType"),
        dataset_sources=fields.strings(body, "datasetDataSources"),
        kernel_sources=fields.strings(body, "kernelDataSources"),
        model_sources=fields.strings(body, "modelDataSources"),
        competition_sources=fields.strings(body, "competitionDataSources"),
        machine_shape=fields.text(body, "machineShape"),
        enable_gpu=bool(fields.flag(body, "enableGpu")),
        enable_tpu=bool(fields.flag(body, "enableTpu")),
        enable_internet=fields.flag(body, "enableInternet"),
        is_private=fields.flag(body, "isPrivate"),
        docker_image=fields.text(body, "dockerImage"),
        session_timeout_seconds=fields.integer(body, "sessionTimeoutSeconds"),
    )


def save_kernel(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    result = state.kernels.push(
        _push_request(body), ctx.user, ctx.now, state.inside_url or ctx.base_url
    )
    if result.error or result.kernel is None or result.session is None:
        return {"error": result.error or "The kernel could not be saved"}
    kernel, session = result.kernel, result.session
    # Kaggle's URL names the kernel only: the session id CancelKernelSession takes is never
    # exposed (kaggle-cli #1169, #1170, #1174). `session_id_in_url` is the emulator's old
    # convention, kept for the tests that name it.
    url = f"https://www.kaggle.com/code/{kernel.ref}"
    if state.options.session_id_in_url:
        url = f"{ctx.base_url}/code/{kernel.ref}?scriptVersionId={session.id}"
    reply: dict[str, Any] = {
        "ref": kernel.ref,
        "url": url,
        "versionNumber": session.version,
        "kernelId": kernel.id,
    }
    for key, values in (
        ("invalidDatasetSources", result.invalid_dataset_sources),
        ("invalidKernelSources", result.invalid_kernel_sources),
        ("invalidModelSources", result.invalid_model_sources),
        ("invalidCompetitionSources", result.invalid_competition_sources),
    ):
        if values:
            reply[key] = values
    return reply


def _labelled(kernel: Kernel, body: Body) -> KernelSession:
    """The session of `versionLabel` ("v<N>"; a bare number is a 404, kaggle-cli #1201), or the
    latest one when no label is given (kaggle-cli #1200)."""
    label = fields.text(body, "versionLabel")
    if not label:
        if kernel.latest is None:
            raise not_found(f"Kernel session of {kernel.ref}")
        return kernel.latest
    number = label[1:] if label.startswith("v") else ""
    found = [s for s in kernel.sessions if number.isdigit() and s.version == int(number)]
    if not found:
        raise not_found(f"Version {label} of kernel {kernel.ref}")
    return found[0]


def _latest_session(state: EmulatorState, ctx: CallContext, body: Body) -> KernelSession:
    owner = fields.required_text(body, "userName")
    slug = fields.required_text(body, "kernelSlug")
    return _labelled(state.kernels.get(owner, slug, ctx.user), body)


def get_kernel_session_status(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    session = _latest_session(state, ctx, body)
    kernel = state.kernels.kernels[session.kernel_ref]
    lag = state.options.status_lag_seconds
    lagging = ctx.now < session.queued_at + lag and len(kernel.sessions) > 1
    if lagging and not fields.text(body, "versionLabel"):
        session = kernel.sessions[-2]  # "latest" still means the version before
    status, failure = session.status, session.failure_message
    if session.kernel_ref in state.faults.stuck_running and status is not WorkerStatus.QUEUED:
        status, failure = WorkerStatus.RUNNING, None
    reply: dict[str, Any] = {"status": status.value}
    if failure:
        reply["failureMessage"] = failure
    return reply


def list_kernel_session_output(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    session = _latest_session(state, ctx, body)
    if state.faults.ignore_output_labels:
        session = state.kernels.kernels[session.kernel_ref].sessions[-1]
    files = state.kernels.output_files(session)[: state.options.max_output_files]
    token = fields.text(body, "pageToken")
    items, next_token = page(
        files, fields.integer(body, "pageSize"), token, state.options.output_page_size
    )
    reply: dict[str, Any] = {
        "files": [
            {
                "url": state.file_url(ctx.base_url, "output", str(session.id), quote(path)),
                "fileName": path,
            }
            for path, _size in items
        ]
    }
    log = state.kernels.log(session)
    if log is not None and not token:
        reply["log"] = log
    if next_token:
        reply["nextPageToken"] = next_token
    return reply


def download_kernel_output(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    owner = fields.required_text(body, "ownerSlug")
    slug = fields.required_text(body, "kernelSlug")
    path = fields.required_text(body, "filePath")
    kernel = state.kernels.get(owner, slug, ctx.user)
    number = fields.integer(body, "versionNumber")
    chosen = [s for s in kernel.sessions if number is None or s.version == number]
    if not chosen:
        raise not_found(f"Version {number} of kernel {kernel.ref}")
    session = chosen[-1]
    if path not in {p for p, _ in state.kernels.output_files(session)}:
        raise not_found(f"Output file {path!r} of {kernel.ref}")
    return Redirect(state.file_url(ctx.base_url, "output", str(session.id), quote(path)))


def cancel_kernel_session(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    session_id = fields.integer(body, "kernelSessionId")
    if not session_id:
        raise bad_request("kernelSessionId is required")
    error = state.kernels.cancel(session_id, ctx.user)
    return {"errorMessage": error} if error else {}


def _metadata(kernel: Kernel) -> dict[str, Any]:
    request, latest = kernel.request, kernel.latest
    metadata: dict[str, Any] = {
        "id": kernel.id,
        "ref": kernel.ref,
        "title": kernel.title,
        "author": kernel.owner,
        "slug": kernel.slug,
        "language": request.language or "python",
        "kernelType": request.kernel_type or "script",
        "isPrivate": request.is_private is not False,
        "enableGpu": request.enable_gpu,
        "enableTpu": request.enable_tpu,
        "enableInternet": bool(request.enable_internet),
        "datasetDataSources": request.dataset_sources,
        "kernelDataSources": request.kernel_sources,
        "modelDataSources": request.model_sources,
        "competitionDataSources": request.competition_sources,
        "currentVersionNumber": len(kernel.sessions),
    }
    if request.machine_shape:
        metadata["machineShape"] = request.machine_shape
    if request.docker_image:
        metadata["dockerImage"] = request.docker_image
    if latest is not None:
        metadata["lastRunTime"] = wire.timestamp(latest.queued_at)
    return metadata


def get_kernel(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    owner = fields.required_text(body, "userName")
    kernel = state.kernels.get(owner, fields.required_text(body, "kernelSlug"), ctx.user)
    source = kernel.request.text
    if fields.text(body, "versionLabel"):
        source = _labelled(kernel, body).script
    return {
        "metadata": _metadata(kernel),
        "blob": {
            "source": source,
            "language": kernel.request.language or "python",
            "kernelType": kernel.request.kernel_type or "script",
            "slug": kernel.slug,
        },
    }


def list_kernels(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    user = fields.text(body, "user") or ctx.user
    search = (fields.text(body, "search") or "").lower()
    mine = [
        k
        for k in sorted(state.kernels.kernels.values(), key=lambda k: k.id)
        if k.owner == user and (k.owner == ctx.user or k.request.is_private is False)
        if search in k.slug.lower() or search in k.title.lower()
    ]
    size = fields.integer(body, "pageSize") or 20
    number = max(1, fields.integer(body, "page") or 1)
    chosen = mine[(number - 1) * size : number * size]
    return {"kernels": [_metadata(k) for k in chosen]}


def delete_kernel(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    owner = fields.required_text(body, "userName")
    kernel = state.kernels.get(owner, fields.required_text(body, "kernelSlug"), ctx.user)
    if kernel.owner != ctx.user:
        raise forbidden(f"Permission 'kernels.delete' was denied for {kernel.ref}")
    if any(session.active for session in kernel.sessions):
        return {"errorMessage": f"Kernel {kernel.ref} has a running session"}
    del state.kernels.kernels[kernel.ref]
    return {}


ROUTES: dict[tuple[str, str], Handler] = {
    (SERVICE, "DeleteKernel"): delete_kernel,
    (SERVICE, "SaveKernel"): save_kernel,
    (SERVICE, "GetKernelSessionStatus"): get_kernel_session_status,
    (SERVICE, "ListKernelSessionOutput"): list_kernel_session_output,
    (SERVICE, "DownloadKernelOutput"): download_kernel_output,
    (SERVICE, "CancelKernelSession"): cancel_kernel_session,
    (SERVICE, "GetKernel"): get_kernel,
    (SERVICE, "ListKernels"): list_kernels,
}
