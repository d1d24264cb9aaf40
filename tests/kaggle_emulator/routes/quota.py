"""kernels.KernelsApiService/GetAcceleratorQuotaStatistics: the caller's weekly GPU/TPU quota."""

from __future__ import annotations

from typing import Any

from tests.kaggle_emulator import wire
from tests.kaggle_emulator.accelerators import Accelerator
from tests.kaggle_emulator.routes.fields import Body
from tests.kaggle_emulator.routes.responses import Handler, Reply
from tests.kaggle_emulator.state import CallContext, EmulatorState


def get_accelerator_quota_statistics(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    reply: dict[str, Any] = {}
    for accelerator, key in ((Accelerator.GPU, "gpuQuota"), (Accelerator.TPU, "tpuQuota")):
        report = state.kernels.quota(ctx.user, accelerator, ctx.now)
        reply[key] = {
            "timeUsed": wire.duration(report.used),
            "timeReserved": wire.duration(report.reserved),
            "totalTimeAllowed": wire.duration(report.allowance),
            "hasEverRun": report.used > 0,
        }
    refresh = state.kernels.quota(ctx.user, Accelerator.GPU, ctx.now).refresh_time
    reply["quotaRefreshTime"] = wire.timestamp(refresh)
    return reply


ROUTES: dict[tuple[str, str], Handler] = {
    ("kernels.KernelsApiService", "GetAcceleratorQuotaStatistics"): (
        get_accelerator_quota_statistics
    ),
}
