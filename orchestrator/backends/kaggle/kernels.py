"""A job's kernel on Kaggle: push a version per segment, read its status, fetch its output.

One kernel per job (`baton-<job id>`); every segment pushes a new version of it. Each push starts
a session and burns quota, so callers record the launch intent first, and `find_launch` reads the
current version's source for the launch id before anything is pushed again.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from kagglesdk.kernels.types.kernels_api_service import (
    ApiCancelKernelSessionRequest,
    ApiGetKernelRequest,
    ApiGetKernelSessionStatusRequest,
    ApiSaveKernelRequest,
)

from orchestrator.backends.base import Rejected, Transient
from orchestrator.backends.kaggle.client import KaggleAccount, KaggleNotFound
from orchestrator.backends.kaggle.packaging import launch_id_of

# Refusals that clear up by themselves: try again on a later tick, don't count a failure.
_BUSY = re.compile(r"maximum batch gpu session|quota|rate limit|try again", re.IGNORECASE)
_SESSION_ID = re.compile(r"scriptVersionId=(\d+)")


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


@dataclass(frozen=True)
class PushedVersion:
    version: int | None
    session_id: int | None


class JobKernel:
    def __init__(self, account: KaggleAccount, slug: str) -> None:
        self.account = account
        self.owner = account.username
        self.slug = slug

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

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
        request.docker_image = push.docker_image
        response = self.account.call(
            "SaveKernel", lambda c: c.kernels.kernels_api_client.save_kernel(request)
        )
        if response.error:
            if _BUSY.search(response.error):
                raise Transient(f"Kaggle deferred the push: {response.error}")
            raise Rejected(f"Kaggle refused the push: {response.error}")
        match = _SESSION_ID.search(response.url or "")
        pushed = PushedVersion(response.version_number, int(match[1]) if match else None)
        invalid = [
            *(response.invalid_dataset_sources or []),
            *(response.invalid_kernel_sources or []),
            *(response.invalid_model_sources or []),
        ]
        if invalid:
            # The session already runs without them: stop it rather than train on nothing.
            self.cancel(pushed.session_id)
            raise Rejected(f"Kaggle could not mount {', '.join(invalid)}")
        return pushed

    def current_launch(self) -> tuple[str, int | None] | None:
        """The launch id in the current version's source, and that version's number."""
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
        return launch_id, version

    def status(self) -> tuple[KernelStatus, str]:
        """The latest version's status and failure message."""
        request = ApiGetKernelSessionStatusRequest()
        request.user_name, request.kernel_slug = self.owner, self.slug
        response = self.account.call(
            "GetKernelSessionStatus",
            lambda c: c.kernels.kernels_api_client.get_kernel_session_status(request),
        )
        name = getattr(response.status, "name", str(response.status))
        return _STATUS.get(name, KernelStatus.RUNNING), response.failure_message or ""

    def download_output(self, target: Path) -> None:
        """Every output file of the latest version (the client follows every page)."""
        target.mkdir(parents=True, exist_ok=True)
        self.account.transfer(
            "kernels_output",
            lambda api: api.kernels_output(self.ref, str(target), force=True, quiet=True),
        )

    def cancel(self, session_id: int | None) -> None:
        if session_id is None:
            return
        request = ApiCancelKernelSessionRequest()
        request.kernel_session_id = session_id
        self.account.call(
            "CancelKernelSession",
            lambda c: c.kernels.kernels_api_client.cancel_kernel_session(request),
        )
