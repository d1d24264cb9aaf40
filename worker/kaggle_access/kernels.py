"""A job's kernel on Kaggle: push a version per segment, read a version's status and output.

One kernel per job (`baton-<job id>`); every segment pushes a new version of it. Each push starts
a session and burns quota, so callers record the launch intent first, and `current_launch` reads
the current version's source for the launch id before anything is pushed again.

Reads name their version (`version_label="v<N>"`): without one Kaggle answers for the latest
version (kaggle-cli #1200), and a bare number is a 404 (#1201). SaveKernel's response carries no
session id (its URL is https://www.kaggle.com/code/<owner>/<slug>, kaggle-cli #1170/#1174), so
Baton cannot cancel a session through the API.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import requests
from kagglesdk import KaggleClient
from kagglesdk.kernels.types.kernels_api_service import (
    ApiGetKernelRequest,
    ApiGetKernelSessionStatusRequest,
    ApiListKernelSessionOutputRequest,
    ApiListKernelSessionOutputResponse,
    ApiSaveKernelRequest,
)

from worker.boundary.errors import AccountRefused, Rejected, Transient
from worker.kaggle_access.client import KaggleAccount, KaggleNotFound
from worker.kaggle_access.kernel_script import launch_id_of

# Refusals that clear up by themselves: try again on a later tick, don't count a failure.
_BUSY = re.compile(r"maximum batch (gpu|cpu|tpu) session|quota|rate limit|try again", re.IGNORECASE)
_OUTPUT_PAGE = 100
# After a refused first push Kaggle may leave the slug an empty "shell": every later push to it
# answers this (the CLI prints "Kernel push error: Notebook not found"; issue 17).
_SHELL = re.compile(r"notebook not found", re.IGNORECASE)
# An account without phone verification may not push GPU/TPU or internet-enabled kernels
# (instructlab #355; fastai course-v3 #347). No retry of the segment can help.
_PHONE = re.compile(r"phone", re.IGNORECASE)


class PushDeferred(Transient):
    """Kaggle refused the push for now (a session cap, quota, a rate limit)."""


class PushRefused(Rejected):
    """Kaggle refused the push for good."""


class KernelShell(Transient):
    """The kernel's slug is an empty shell left by a refused first push: push under another."""


def phone_reason(error: str) -> str:
    return (
        f"Kaggle refused the push: {error} An account without phone verification cannot run GPU, "
        "TPU or internet-enabled kernels: verify your phone at https://www.kaggle.com/settings, "
        "then resume the job"
    )


class KernelStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETE = "complete"
    ERROR = "error"
    CANCELLED = "cancelled"


_STATUS = {
    "QUEUED": KernelStatus.QUEUED,
    "NEW_SCRIPT": KernelStatus.QUEUED,
    "RUNNING": KernelStatus.RUNNING,
    "CANCEL_REQUESTED": KernelStatus.RUNNING,
    "COMPLETE": KernelStatus.COMPLETE,
    "ERROR": KernelStatus.ERROR,
    "CANCEL_ACKNOWLEDGED": KernelStatus.CANCELLED,
}


def version_label(version: int | None) -> str | None:
    return None if version is None else f"v{version}"


@dataclass(frozen=True)
class KernelPush:
    """Everything one push sends, apart from the source."""

    machine_shape: str | None
    timeout_seconds: int
    enable_internet: bool
    is_private: bool
    dataset_sources: list[str]
    kernel_sources: list[str]
    model_sources: list[str]
    docker_image: str | None
    competition_sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PushedVersion:
    version: int | None
    # Sources Kaggle could not mount: the session runs without them (and cannot be stopped).
    invalid_sources: tuple[str, ...] = ()


class JobKernel:
    def __init__(self, account: KaggleAccount, slug: str) -> None:
        self.account = account
        self.owner = account.username
        self.slug = slug

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

    @property
    def url(self) -> str:
        """Where its owner sees the kernel, and stops a running session, on kaggle.com."""
        return f"https://www.kaggle.com/code/{self.ref}"

    def push(self, source: str, push: KernelPush) -> PushedVersion:
        request = ApiSaveKernelRequest()
        request.slug = self.ref
        request.new_title = self.slug
        request.text = source
        request.language = "python"
        request.kernel_type = "script"
        request.is_private = push.is_private
        request.enable_gpu = False  # machine_shape decides; enable_gpu alone means a P100
        request.enable_tpu = False
        request.machine_shape = push.machine_shape
        request.enable_internet = push.enable_internet
        request.session_timeout_seconds = push.timeout_seconds
        request.dataset_data_sources = push.dataset_sources
        request.kernel_data_sources = push.kernel_sources
        request.model_data_sources = push.model_sources
        request.competition_data_sources = push.competition_sources
        request.docker_image = push.docker_image
        response = self.account.call(
            "SaveKernel", lambda c: c.kernels.kernels_api_client.save_kernel(request)
        )
        if response.error:
            if _SHELL.search(response.error):
                raise KernelShell(f"Kaggle left {self.ref} an empty shell: {response.error}")
            if _PHONE.search(response.error):
                raise AccountRefused(phone_reason(response.error))
            if _BUSY.search(response.error):
                raise PushDeferred(f"Kaggle deferred the push: {response.error}")
            raise PushRefused(f"Kaggle refused the push: {response.error}")
        invalid = (
            *(response.invalid_dataset_sources or []),
            *(response.invalid_kernel_sources or []),
            *(response.invalid_model_sources or []),
            *(response.invalid_competition_sources or []),
        )
        return PushedVersion(response.version_number or None, tuple(invalid))

    def current_launch(self) -> tuple[str, int | None] | None:
        """The launch id in the current version's source, and that version's number.

        GetKernel returns the whole script (about 1 MB with Baton's code): never call it per tick.
        """
        request = ApiGetKernelRequest()
        request.user_name, request.kernel_slug = self.owner, self.slug
        try:
            kernel = self.account.call(
                "GetKernel", lambda c: c.kernels.kernels_api_client.get_kernel(request)
            )
        except KaggleNotFound:
            return None
        launch_id = launch_id_of((kernel.blob.source if kernel.blob else "") or "")
        if launch_id is None:
            return None
        version = kernel.metadata.current_version_number if kernel.metadata else None
        return launch_id, version or None

    def status(self, version: int | None) -> tuple[KernelStatus, str]:
        """A version's status and failure message (the latest version's when None)."""
        request = ApiGetKernelSessionStatusRequest()
        request.user_name, request.kernel_slug = self.owner, self.slug
        request.version_label = version_label(version)
        response = self.account.call(
            "GetKernelSessionStatus",
            lambda c: c.kernels.kernels_api_client.get_kernel_session_status(request),
        )
        name = getattr(response.status, "name", str(response.status))
        return _STATUS.get(name, KernelStatus.RUNNING), response.failure_message or ""

    def download_output(
        self, target: Path, version: int | None, skip: Callable[[set[str], str], bool] | None = None
    ) -> int:
        """Every output file of one version, and its log as `<slug>.log`, into `target`; the
        bytes fetched. `skip(names, name)`: leave `name` out, knowing every name listed."""
        target.mkdir(parents=True, exist_ok=True)
        token, listed = "", dict[str, str]()
        while True:
            request = ApiListKernelSessionOutputRequest()
            request.user_name, request.kernel_slug = self.owner, self.slug
            request.version_label = version_label(version)
            request.page_size, request.page_token = _OUTPUT_PAGE, token or None
            page = self.account.call("ListKernelSessionOutput", _list_output(request))
            listed |= {item.file_name: item.url for item in page.files or []}
            if page.log and not token:
                (target / f"{self.slug}.log").write_text(page.log)
            token = page.next_page_token or ""
            if not token:
                break
        fetched = 0
        for name, url in listed.items():
            if skip is None or not skip(set(listed), name):
                fetched += self._fetch_file(url, target, name)
        return fetched

    def _fetch_file(self, url: str, target: Path, name: str) -> int:
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts:
            raise Rejected(f"the kernel output names an unsafe path {name!r}")
        path = target.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)

        def fetch() -> None:
            # Signed URLs: no credentials. Unlike KaggleApi.kernels_output, an error page is an
            # error here, never written as the file.
            with requests.get(url, stream=True, timeout=60) as response:
                response.raise_for_status()
                with path.open("wb") as out:
                    for chunk in response.iter_content(1 << 20):
                        out.write(chunk)

        self.account.fetch(f"output file {name}", fetch)
        return path.stat().st_size


def _list_output(
    request: ApiListKernelSessionOutputRequest,
) -> Callable[[KaggleClient], ApiListKernelSessionOutputResponse]:
    return lambda client: client.kernels.kernels_api_client.list_kernel_session_output(request)
