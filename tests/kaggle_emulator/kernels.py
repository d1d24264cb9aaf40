"""Kernels, their versions and sessions: the push rules, status, output and cancel.

Every push creates a version and a session; nothing here is idempotent, as on Kaggle. A push
with an accelerator is refused (in the response's `error`, HTTP 200) when the weekly quota is
spent, or when the account already has `max_gpu_sessions` GPU sessions and `gpu_overflow` is
"reject" ("queue" holds it QUEUED until a slot frees). The caller holds the emulator's lock.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from secrets import token_urlsafe

from orchestrator.backends.local.sessions import SessionState
from tests.kaggle_emulator import quota
from tests.kaggle_emulator.accelerators import Accelerator, accelerator_for, machine_for
from tests.kaggle_emulator.data_sources import DataSources
from tests.kaggle_emulator.datasets import DatasetRegistry
from tests.kaggle_emulator.errors import ApiError, bad_request, forbidden, not_found
from tests.kaggle_emulator.faults import Faults
from tests.kaggle_emulator.first_contact import SHELL_GET_ERROR, SHELL_PUSH_ERROR, FirstContact
from tests.kaggle_emulator.kernel_sessions import (
    KernelSession,
    Mount,
    WorkerStatus,
    outcome,
)
from tests.kaggle_emulator.runner import SCRIPT_NAME, SessionRunner
from tests.kaggle_emulator.user_secrets import UserSecrets
from worker.boundary.paths import LOG_FILE, WORKING_DIR

# Where an internet-off session's API calls go: nowhere (the discard port refuses them).
OFFLINE_API_URL = "http://127.0.0.1:9"


@dataclass(frozen=True)
class KernelLimits:
    max_gpu_sessions: int
    max_cpu_sessions: int
    gpu_overflow: str  # "reject" or "queue"
    pinned_sources: bool
    mount_layout: str  # "flat", "datasets" or "versioned"
    queue_seconds: float
    default_session_seconds: float
    max_session_seconds: dict[Accelerator, float]
    allowance_seconds: dict[Accelerator, float]
    week: quota.QuotaWeek
    withheld_accelerators: frozenset[str] = frozenset()
    working_bytes_cap: int | None = None


@dataclass
class PushRequest:
    """The fields of ApiSaveKernelRequest the emulator acts on."""

    slug: str | None
    kernel_id: int | None
    title: str | None
    text: str
    language: str | None
    kernel_type: str | None
    dataset_sources: list[str]
    kernel_sources: list[str]
    model_sources: list[str]
    competition_sources: list[str]
    machine_shape: str | None
    enable_gpu: bool
    enable_tpu: bool
    enable_internet: bool | None
    is_private: bool | None
    docker_image: str | None
    session_timeout_seconds: int | None


@dataclass
class Kernel:
    id: int
    owner: str
    slug: str
    title: str
    request: PushRequest
    sessions: list[KernelSession] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

    @property
    def latest(self) -> KernelSession | None:
        return self.sessions[-1] if self.sessions else None


@dataclass
class PushResult:
    kernel: Kernel | None = None
    session: KernelSession | None = None
    error: str | None = None
    invalid_dataset_sources: list[str] = field(default_factory=list)
    invalid_kernel_sources: list[str] = field(default_factory=list)
    invalid_model_sources: list[str] = field(default_factory=list)
    invalid_competition_sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QuotaReport:
    used: float
    reserved: float
    allowance: float
    refresh_time: float


class KernelRegistry:
    def __init__(
        self,
        root: Path,
        runner: SessionRunner,
        datasets: DatasetRegistry,
        secrets: UserSecrets,
        limits: KernelLimits,
        faults: Faults,
        session_tokens: dict[int, str] | None = None,
        first_contact: FirstContact | None = None,
        data_sources: DataSources | None = None,
    ) -> None:
        self.data_sources = data_sources or DataSources()
        self.first_contact = first_contact or FirstContact()
        self._session_tokens = session_tokens
        self._root = root
        self._runner = runner
        self._datasets = datasets
        self._secrets = secrets
        self._limits = limits
        self._faults = faults
        self.kernels: dict[str, Kernel] = {}
        self.sessions: dict[int, KernelSession] = {}
        self.push_counts: Counter[str] = Counter()
        self._next_kernel_id = 1
        self._next_session_id = 1

    def set_allowance(self, accelerator: Accelerator, seconds: float) -> None:
        """Change an accelerator's weekly allowance from now on."""
        allowance = {**self._limits.allowance_seconds, accelerator: seconds}
        self._limits = replace(self._limits, allowance_seconds=allowance)

    # ---- push -------------------------------------------------------------------------

    def push(self, request: PushRequest, user: str, now: float, api_url: str) -> PushResult:
        owner, slug = self._identify(request, user)
        if (request.language or "python") != "python":
            return PushResult(error=f"Language {request.language!r} is not supported here")
        accelerator = accelerator_for(request.machine_shape, request.enable_gpu, request.enable_tpu)
        ref = f"{owner}/{slug}"
        if self.first_contact.is_shell(ref):
            return PushResult(error=SHELL_PUSH_ERROR)
        refusal = self.first_contact.phone_refusal(
            accelerator, request.enable_internet
        ) or self._refusal(user, accelerator, now)
        if refusal:
            self.first_contact.refused(ref, known=ref in self.kernels)
            return PushResult(error=refusal)
        result = PushResult()
        mounts = self._mounts(request, user, now, result)
        kernel = self._kernel(owner, slug, request)
        limit = min(
            float(request.session_timeout_seconds or self._limits.default_session_seconds),
            self._limits.max_session_seconds[accelerator],
        )
        session = KernelSession(
            id=self._next_session_id,
            kernel_id=kernel.id,
            kernel_ref=kernel.ref,
            owner=owner,
            version=len(kernel.sessions) + 1,
            accelerator=accelerator,
            limit_seconds=limit,
            root=self._root / str(self._next_session_id),
            script=_script_text(request),
            mounts=mounts,
            queued_at=now,
            start_after=now + self._limits.queue_seconds,
            api_url=api_url if self._reaches_api(request) else OFFLINE_API_URL,
            machine=machine_for(accelerator, self._limits.withheld_accelerators),
            cut_keeps_output=self.first_contact.cut_keeps_output,
        )
        self._next_session_id += 1
        kernel.sessions.append(session)
        self.sessions[session.id] = session
        self.push_counts[kernel.ref] += 1
        result.kernel, result.session = kernel, session
        return result

    def _reaches_api(self, request: PushRequest) -> bool:
        return bool(request.enable_internet) or not self.first_contact.internet_off_blocks_api

    def _identify(self, request: PushRequest, user: str) -> tuple[str, str]:
        if request.slug:
            owner, _, slug = request.slug.partition("/")
            if not slug or "/" in slug:
                raise bad_request(f"Invalid kernel slug {request.slug!r}; use owner/slug")
        elif request.kernel_id:
            kernel = next((k for k in self.kernels.values() if k.id == request.kernel_id), None)
            if kernel is None:
                raise not_found(f"Kernel {request.kernel_id}")
            owner, slug = kernel.owner, kernel.slug
        else:
            raise bad_request("slug or id is required")
        if owner != user:
            raise forbidden(f"Permission 'kernels.update' was denied for {owner}/{slug}")
        if not request.text:
            raise bad_request("text is required")
        return owner, slug

    def _refusal(self, user: str, accelerator: Accelerator, now: float) -> str | None:
        if accelerator is Accelerator.NONE:
            active_cpu = [s for s in self._active(user) if s.accelerator is Accelerator.NONE]
            if len(active_cpu) >= self._limits.max_cpu_sessions:
                return (
                    f"Maximum batch CPU session count of {self._limits.max_cpu_sessions} reached."
                )
            return None
        report = self.quota(user, accelerator, now)
        if quota.exhausted(report.used, report.allowance):
            # Kaggle's own text, as field logs show it; it names no refresh time.
            return (
                f"Maximum weekly {accelerator.upper()} quota of "
                f"{report.allowance / 3600:.2f} hours reached."
            )
        active_gpu = [s for s in self._active(user) if s.accelerator is Accelerator.GPU]
        if (
            accelerator is Accelerator.GPU
            and self._limits.gpu_overflow == "reject"
            and len(active_gpu) >= self._limits.max_gpu_sessions
        ):
            return f"Maximum batch GPU session count of {self._limits.max_gpu_sessions} reached."
        return None

    def _mounts(
        self, request: PushRequest, user: str, now: float, result: PushResult
    ) -> list[Mount]:
        mounts = []
        for source in request.dataset_sources:
            mount = self._dataset_mount(source, user, now)
            if mount is None:
                result.invalid_dataset_sources.append(source)
            else:
                mounts.append(mount)
        for source in request.kernel_sources:
            mount = self._kernel_mount(source, user)
            if mount is None:
                result.invalid_kernel_sources.append(source)
            else:
                mounts.append(mount)
        for source in request.model_sources:
            mount = self.data_sources.model(source)
            if mount is None:
                result.invalid_model_sources.append(source)
            else:
                mounts.append(mount)
        for source in request.competition_sources:
            mount = self.data_sources.competition(source)
            if mount is None:
                result.invalid_competition_sources.append(source)
            else:
                mounts.append(mount)
        return mounts

    def _dataset_mount(self, source: str, user: str, now: float) -> Mount | None:
        parts = source.split("/")
        try:
            if len(parts) == 2:
                number = None
            elif len(parts) == 3:
                number = int(parts[2])
            elif len(parts) == 4 and parts[2] == "versions":
                number = int(parts[3])
            else:
                return None
            if number is not None and not self._limits.pinned_sources:
                return None
            if number is not None and number > 1 and self._faults.take_stale_mount():
                number -= 1
            version = self._datasets.version(parts[0], parts[1], number, user, now)
        except (ValueError, ApiError):
            return None
        layout = {
            "flat": parts[1],
            "datasets": f"datasets/{parts[0]}/{parts[1]}",
            "versioned": f"datasets/{parts[0]}/{parts[1]}/versions/{version.number}",
        }[self._limits.mount_layout]
        return Mount(layout, version.directory)

    def _kernel_mount(self, source: str, user: str) -> Mount | None:
        named = self.data_sources.kernel_source(source)
        kernel = self.kernels.get(named[0]) if named is not None else None
        if named is None or kernel is None or kernel.owner != user:
            return None
        done = [s for s in kernel.sessions if s.status is WorkerStatus.COMPLETE and s.output_kept]
        if named[1] is not None:
            done = [s for s in done if s.version == named[1]]
        if not done:
            return None
        name = self.data_sources.kernel_mount_name(kernel.owner, kernel.slug)
        return Mount(name, done[-1].root / WORKING_DIR)

    def _kernel(self, owner: str, slug: str, request: PushRequest) -> Kernel:
        ref = f"{owner}/{slug}"
        kernel = self.kernels.get(ref)
        if kernel is None:
            kernel = Kernel(self._next_kernel_id, owner, slug, request.title or slug, request)
            self._next_kernel_id += 1
            self.kernels[ref] = kernel
        kernel.request = request
        kernel.title = request.title or kernel.title
        return kernel

    # ---- lifecycle --------------------------------------------------------------------

    def _active(self, user: str) -> list[KernelSession]:
        return [s for s in self.sessions.values() if s.owner == user and s.active]

    def reconcile(self, now: float) -> None:
        """Start due sessions and record finished ones."""
        for session in sorted(self.sessions.values(), key=lambda s: s.id):
            if session.status is WorkerStatus.QUEUED:
                self._maybe_start(session, now)
            elif session.active:
                self._observe(session, now)

    def _maybe_start(self, session: KernelSession, now: float) -> None:
        if session.cancel_wanted:
            session.ended_at = now
            session.move(WorkerStatus.CANCEL_ACKNOWLEDGED)
            return
        if now < session.start_after:
            return
        if session.accelerator is Accelerator.GPU:
            running = [
                s
                for s in self._active(session.owner)
                if s.accelerator is Accelerator.GPU and s.status is not WorkerStatus.QUEUED
            ]
            if len(running) >= self._limits.max_gpu_sessions:
                return
        if self._session_tokens is not None:
            self._session_tokens[session.id] = token_urlsafe(16)
        try:
            self._runner.start(session, self._secrets.for_kernel(session.kernel_ref))
        except OSError as error:
            session.ended_at = now
            session.failure_message = f"The session could not start: {error}"
            session.move(WorkerStatus.ERROR)
            return
        session.started_at = now
        session.move(WorkerStatus.RUNNING)

    def _over_working_cap(self, session: KernelSession, now: float) -> bool:
        """Whether a running session wrote past the /kaggle/working cap (looked at once a
        second); if so it is stopped, and ends ERROR with the reason."""
        cap = self._limits.working_bytes_cap
        if cap is None or session.status is not WorkerStatus.RUNNING:
            return False
        if now < session.working_checked_at + 1.0:
            return False
        session.working_checked_at = now
        working = session.root / WORKING_DIR
        size = sum(p.stat().st_size for p in working.rglob("*") if p.is_file())
        if size <= cap:
            return False
        session.failure_message = (
            f"Your notebook wrote {size} bytes to /kaggle/working, past its limit of {cap} "
            "bytes, and was stopped."
        )
        self._runner.cancel(session)
        return True

    def _observe(self, session: KernelSession, now: float) -> None:
        if self._over_working_cap(session, now):
            session.over_working_cap = True
        state = self._runner.state(session)
        if state is SessionState.FINISHED:
            result = self._runner.result(session)
            if result is None:
                return
            status, message = outcome(result, session.limit_seconds, session.cut_keeps_output)
            session.output_kept = not result.output_dropped
            if session.over_working_cap:
                status, message = WorkerStatus.ERROR, session.failure_message
            session.failure_message = message
        elif state is SessionState.LOST and session.over_working_cap:
            # Stopped for the cap before its supervisor could write a status (a write during
            # start-up): the cap, set as the failure message, is still the reason.
            status = WorkerStatus.ERROR
        elif state is SessionState.LOST and session.status is WorkerStatus.CANCEL_REQUESTED:
            # A cancel that reached the supervisor before it installed its signal handlers
            # kills it without a status.json; the session is cancelled all the same.
            status = WorkerStatus.CANCEL_ACKNOWLEDGED
        elif state is SessionState.LOST:
            status, message = WorkerStatus.ERROR, "The session's machine was lost."
            session.failure_message = message
        else:
            return
        session.ended_at = now
        session.move(status)

    def cancel(self, session_id: int, user: str) -> str | None:
        """Cancel a session; returns an error message when there is nothing to cancel."""
        session = self.sessions.get(session_id)
        if session is None:
            raise not_found(f"Kernel session {session_id}")
        if session.owner != user:
            raise forbidden(f"Permission 'kernels.update' was denied for session {session_id}")
        if session.status is WorkerStatus.QUEUED:
            session.cancel_wanted = True
            return None
        if session.status is WorkerStatus.RUNNING:
            if self._runner.cancel(session):
                session.move(WorkerStatus.CANCEL_REQUESTED)
            return None
        return f"Kernel session {session_id} is not running ({session.status})"

    # ---- reads ------------------------------------------------------------------------

    def get(self, owner: str, slug: str, user: str) -> Kernel:
        if self.first_contact.is_shell(f"{owner}/{slug}"):
            raise ApiError(500, SHELL_GET_ERROR)
        kernel = self.kernels.get(f"{owner}/{slug}")
        if kernel is None:
            raise not_found(f"Kernel {owner}/{slug}")
        if kernel.owner != user and kernel.request.is_private is not False:
            raise forbidden(f"Permission 'kernels.get' was denied for {owner}/{slug}")
        return kernel

    def output_files(self, session: KernelSession) -> list[tuple[str, int]]:
        """(path, size) of a finished session's saved output, sorted; empty if none was kept."""
        working = session.root / WORKING_DIR
        if session.active or not session.output_kept or not working.is_dir():
            return []
        files = []
        for path in sorted(working.rglob("*")):
            relative = path.relative_to(working).as_posix()
            if path.is_file() and relative != SCRIPT_NAME:
                files.append((relative, path.stat().st_size))
        return files

    def log(self, session: KernelSession) -> str | None:
        """The session's log in Kaggle's JSON-lines-in-an-array form, once it has finished."""
        path = session.root / LOG_FILE
        if session.active or not path.is_file():
            return None
        lines = path.read_text(errors="replace").splitlines(keepends=True)
        return json.dumps([{"stream_name": "stdout", "time": 0.0, "data": line} for line in lines])

    def quota(self, user: str, accelerator: Accelerator, now: float) -> QuotaReport:
        mine = [
            s
            for s in self.sessions.values()
            if s.owner == user and s.accelerator is accelerator and s.started_at is not None
        ]
        week_start = self._limits.week.start(now)
        intervals = [(s.started_at or now, s.ended_at) for s in mine]
        running = [(s.started_at or now, s.limit_seconds) for s in mine if s.ended_at is None]
        return QuotaReport(
            used=quota.used_seconds(intervals, week_start, now),
            reserved=quota.reserved_seconds(running, now),
            allowance=self._limits.allowance_seconds.get(accelerator, 0.0),
            refresh_time=self._limits.week.refresh_time(now),
        )


def _script_text(request: PushRequest) -> str:
    """The Python source a push runs: the script, or a notebook's code cells in order."""
    if request.kernel_type != "notebook":
        return request.text
    try:
        cells = json.loads(request.text).get("cells", [])
    except (json.JSONDecodeError, AttributeError):
        raise bad_request("A notebook's text must be .ipynb JSON") from None
    sources = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else source)
    return "\n\n".join(sources) + "\n"
