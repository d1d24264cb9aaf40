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
        entry = {
            "timeUsed": wire.duration(report.used),
            "timeReserved": wire.duration(report.reserved),
            "totalTimeAllowed": wire.duration(report.allowance),
            "hasEverRun": report.used > 0,
        }
        # proto3 JSON leaves zero values out: no timeUsed before a first session, no
        # timeReserved while nothing runs (`send_zero_fields` keeps the old behaviour).
        zeros = {"timeUsed": report.used, "timeReserved": report.reserved}
        omit = {k for k, v in zeros.items() if v == 0} | (
            {"hasEverRun"} if not report.used else set()
        )
        if not state.options.send_zero_fields:
            entry = {k: v for k, v in entry.items() if k not in omit}
        reply[key] = entry
    refresh = state.kernels.quota(ctx.user, Accelerator.GPU, ctx.now).refresh_time
    reply["quotaRefreshTime"] = wire.timestamp(refresh)
    return reply


ROUTES: dict[tuple[str, str], Handler] = {
    ("kernels.KernelsApiService", "GetAcceleratorQuotaStatistics"): (
        get_accelerator_quota_statistics
    ),
}
