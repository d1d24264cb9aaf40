"""What a self-chaining kernel pushes its successor with: the account's findings and its quota.

The orchestrator sizes every segment it pushes to the quota left and names the checkpoint the
way the account accepts (`baton kaggle check`, a refused pin). A kernel that pushes its own
successor must do the same, or the chain runs past the weekly quota ("30.93/30h" in a public
log) and pins sources an account refuses. So it reads `GetAcceleratorQuotaStatistics` just
before it pushes, and the orchestrator hands it what it knows in the kernel's options
(worker.boundary.kernel_options.SelfChain).
"""

from __future__ import annotations

import math
from datetime import timedelta

from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest

from worker.boundary.contract import SegmentResult
from worker.boundary.kernel_options import SelfChain
from worker.boundary.planning import measured_segment, minimum_session_seconds
from worker.kaggle_access.client import KaggleAccount


def checkpoint_source(dataset_ref: str, version: int, chain: SelfChain) -> str:
    """`owner/slug/N`, or `owner/slug` where the account is known to refuse pinned sources."""
    if chain.pinned_sources is False:
        return dataset_ref
    return f"{dataset_ref}/{version}"


def _seconds(duration: timedelta | None) -> float:
    return duration.total_seconds() if duration is not None else 0.0


def quota_left(account: KaggleAccount, chain: SelfChain) -> float | None:
    """Accelerator seconds the account has left this week, less the job's reserve; None for a
    CPU job (no quota)."""
    if not chain.uses_quota:
        return None
    request = ApiGetAcceleratorQuotaStatisticsRequest()
    stats = account.call(
        "GetAcceleratorQuotaStatistics",
        lambda c: c.kernels.kernels_api_client.get_accelerator_quota_statistics(request),
    )
    quota = stats.tpu_quota if chain.tpu else stats.gpu_quota
    if quota is None:
        return None
    left = (
        _seconds(quota.total_time_allowed)
        - _seconds(quota.time_used)
        - _seconds(quota.time_reserved)
        - chain.quota_reserve_seconds
    )
    return max(0.0, left)


def successor_seconds(
    parent_seconds: float,
    left: float | None,
    result: SegmentResult,
    chain: SelfChain,
    upload_seconds: float = 0.0,
) -> int | None:
    """The successor's whole-second limit: the parent's, or less where the quota is shorter;
    None when what is left is not worth a session (the orchestrator's rule, planning.py: the
    quota is better spent after the refresh)."""
    if left is None:
        return int(parent_seconds)
    fixed = [measured_segment(result, upload_seconds)]
    if left < minimum_session_seconds(fixed, chain.min_session_seconds):
        return None
    return math.floor(min(parent_seconds, left))
