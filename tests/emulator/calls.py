"""Kaggle calls the emulator tests make, through the real kagglesdk client only."""

from __future__ import annotations

import time

from kagglesdk import KaggleClient
from kagglesdk.kernels.types.kernels_api_service import (
    ApiCancelKernelSessionRequest,
    ApiCancelKernelSessionResponse,
    ApiGetAcceleratorQuotaStatisticsRequest,
    ApiGetAcceleratorQuotaStatisticsResponse,
    ApiGetKernelRequest,
    ApiGetKernelResponse,
    ApiGetKernelSessionStatusRequest,
    ApiGetKernelSessionStatusResponse,
    ApiListKernelSessionOutputRequest,
    ApiListKernelSessionOutputResponse,
    ApiSaveKernelRequest,
    ApiSaveKernelResponse,
)
from kagglesdk.kernels.types.kernels_enums import KernelWorkerStatus

TERMINAL = {
    KernelWorkerStatus.COMPLETE,
    KernelWorkerStatus.ERROR,
    KernelWorkerStatus.CANCEL_ACKNOWLEDGED,
}


def push(
    client: KaggleClient,
    ref: str,
    script: str,
    *,
    machine_shape: str | None = None,
    timeout: int | None = 60,
    datasets: list[str] | None = None,
    internet: bool = False,
) -> ApiSaveKernelResponse:
    request = ApiSaveKernelRequest()
    request.slug = ref
    request.new_title = ref.split("/")[1]
    request.text = script
    request.language = "python"
    request.kernel_type = "script"
    request.is_private = True
    request.enable_internet = internet  # an internet-off session cannot call the API back
    request.machine_shape = machine_shape
    request.session_timeout_seconds = timeout
    request.dataset_data_sources = datasets or []
    return client.kernels.kernels_api_client.save_kernel(request)


def status(
    client: KaggleClient, ref: str, version: int | None = None
) -> ApiGetKernelSessionStatusResponse:
    """The status of `version` ("v<N>"), or of what Kaggle calls the latest one when None."""
    request = ApiGetKernelSessionStatusRequest()
    request.user_name, request.kernel_slug = ref.split("/")
    request.version_label = None if version is None else f"v{version}"
    return client.kernels.kernels_api_client.get_kernel_session_status(request)


def wait_for(
    client: KaggleClient,
    ref: str,
    wanted: set[KernelWorkerStatus],
    timeout: float = 15.0,
    version: int | None = None,
) -> tuple[ApiGetKernelSessionStatusResponse, list[KernelWorkerStatus]]:
    """Poll until the status (of `version`, if given) is one of `wanted`; returns it and every
    status seen. Without a version, a just-pushed kernel may still answer for the one before."""
    seen: list[KernelWorkerStatus] = []
    deadline = time.monotonic() + timeout
    while True:
        current = status(client, ref, version)
        if not seen or seen[-1] != current.status:
            seen.append(current.status)
        if current.status in wanted:
            return current, seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{ref} stayed {seen} for {timeout}s; wanted {wanted}")
        time.sleep(0.05)


def list_output(
    client: KaggleClient, ref: str, page_token: str | None = None, page_size: int | None = None
) -> ApiListKernelSessionOutputResponse:
    request = ApiListKernelSessionOutputRequest()
    request.user_name, request.kernel_slug = ref.split("/")
    request.page_token = page_token
    request.page_size = page_size
    return client.kernels.kernels_api_client.list_kernel_session_output(request)


def cancel(client: KaggleClient, kernel_session_id: int) -> ApiCancelKernelSessionResponse:
    request = ApiCancelKernelSessionRequest()
    request.kernel_session_id = kernel_session_id
    return client.kernels.kernels_api_client.cancel_kernel_session(request)


def get_kernel(client: KaggleClient, ref: str) -> ApiGetKernelResponse:
    request = ApiGetKernelRequest()
    request.user_name, request.kernel_slug = ref.split("/")
    return client.kernels.kernels_api_client.get_kernel(request)


def quota(client: KaggleClient) -> ApiGetAcceleratorQuotaStatisticsResponse:
    request = ApiGetAcceleratorQuotaStatisticsRequest()
    return client.kernels.kernels_api_client.get_accelerator_quota_statistics(request)
