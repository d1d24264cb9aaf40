"""`python -m benchmarks.fixed_rate`: an open-loop HTTP client (aiohttp) at a fixed request rate.

Request i is sent at start + i/rate whether or not earlier ones have answered, so a slow server
cannot slow the client down and hide its own latency (coordinated omission). Each request's
latency is measured from its scheduled send time. Reads a JSON plan on stdin, writes results as
JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import aiohttp
import psutil

CONNECTIONS = 32  # as a load balancer's pool to its backends


@dataclass(frozen=True)
class Phase:
    name: str
    paths: list[str]  # sent in this order, cycling if shorter than `requests`
    requests: int


@dataclass(frozen=True)
class PhaseResult:
    name: str
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    achieved_rate: float
    max_send_lag_ms: float  # how far behind schedule the client itself fell
    worst_second_p99_ms: float  # the p99 of the worst one-second window of scheduled sends
    machine: dict[str, float]  # the whole machine's CPU over the phase, in % of all cores
    # Wall-clock bounds (time.time()), to match the phase with what the server recorded.
    started_at: float = 0.0
    ended_at: float = 0.0
    # CPU the server's processes (the `server_pid` tree) spent per request: unlike latency, it
    # hardly depends on what else the machine runs.
    server_cpu_ms_per_request: float | None = None


def machine_share(before: Any, after: Any) -> dict[str, float]:
    """How the machine's CPU time went between two `psutil.cpu_times()`, in percent: busy at
    normal priority (user, system, interrupts), busy at lowered priority (`nice`: background
    work the benchmark's processes preempt), iowait and steal (taken by the hypervisor)."""
    # Linux counts guest time inside user and nice already.
    fields = [field for field in after._fields if field not in ("guest", "guest_nice")]
    spent = {field: getattr(after, field) - getattr(before, field) for field in fields}
    total = sum(spent.values()) or 1.0
    not_busy = ("idle", "nice", "iowait", "steal")

    def share(seconds: float) -> float:
        return round(100 * seconds / total, 1)

    return {
        "busy_pct": share(total - sum(spent.get(field, 0.0) for field in not_busy)),
        "nice_pct": share(spent.get("nice", 0.0)),
        "iowait_pct": share(spent.get("iowait", 0.0)),
        "steal_pct": share(spent.get("steal", 0.0)),
    }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def worst_second(scheduled: list[float], latencies: list[float]) -> float:
    """The highest p99 among the one-second windows of scheduled send times."""
    windows: dict[int, list[float]] = {}
    for at, latency in zip(scheduled, latencies, strict=True):
        windows.setdefault(int(at), []).append(latency)
    return max(percentile(window, 99) for window in windows.values())


def summarize(
    name: str,
    scheduled: list[float],
    latencies: list[float],
    lags: list[float],
    errors: int,
    elapsed: float,
    machine: dict[str, float],
) -> PhaseResult:
    return PhaseResult(
        name=name,
        requests=len(latencies),
        errors=errors,
        p50_ms=round(percentile(latencies, 50) * 1000, 2),
        p99_ms=round(percentile(latencies, 99) * 1000, 2),
        max_ms=round(max(latencies) * 1000, 2),
        achieved_rate=round(len(latencies) / elapsed, 1),
        max_send_lag_ms=round(max(lags) * 1000, 2),
        worst_second_p99_ms=round(worst_second(scheduled, latencies) * 1000, 2),
        machine=machine,
    )


def tree_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU of a process and its descendants so far (None: no such process)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            times = process.cpu_times()
            total += times.user + times.system
        return total
    except psutil.Error:
        return None


async def run_phase(
    client: aiohttp.ClientSession, phase: Phase, rate: float, server_pid: int | None = None
) -> PhaseResult:
    scheduled_at: list[float] = []  # seconds into the phase, in the order answers came
    latencies: list[float] = []
    lags: list[float] = []
    errors = 0
    cpu_before = psutil.cpu_times()
    server_before = tree_cpu_seconds(server_pid)
    started_at = time.time()
    start = time.perf_counter()
    # Requests beyond the connections wait here, in a FIFO, rather than in the client's pool,
    # whose bookkeeping may grow with its queue and slow the client itself under a backlog.
    connections = asyncio.Semaphore(CONNECTIONS)

    async def one(path: str, scheduled: float) -> None:
        nonlocal errors
        lags.append(time.perf_counter() - scheduled)
        async with connections:
            try:
                async with client.get(path) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
        scheduled_at.append(scheduled - start)
        latencies.append(time.perf_counter() - scheduled)

    tasks = []
    for index in range(phase.requests):
        scheduled = start + index / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        path = phase.paths[index % len(phase.paths)]
        tasks.append(asyncio.create_task(one(path, scheduled)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    machine = machine_share(cpu_before, psutil.cpu_times())
    server_after = tree_cpu_seconds(server_pid)
    result = summarize(phase.name, scheduled_at, latencies, lags, errors, elapsed, machine)
    per_request = None
    if server_before is not None and server_after is not None:
        per_request = round(1000 * (server_after - server_before) / phase.requests, 2)
    return replace(
        result,
        started_at=started_at,
        ended_at=started_at + elapsed,
        server_cpu_ms_per_request=per_request,
    )


async def run(
    url: str, token: str, rate: float, phases: list[Phase], server_pid: int | None = None
) -> list[PhaseResult]:
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(base_url=url, headers=headers, connector=connector) as client:
        async with client.get("/livez") as first:
            await first.read()
        return [await run_phase(client, phase, rate, server_pid) for phase in phases]


def main() -> None:
    plan: dict[str, Any] = json.load(sys.stdin)
    phases = [Phase(**phase) for phase in plan["phases"]]
    results = asyncio.run(
        run(plan["url"], plan["token"], float(plan["rate"]), phases, plan.get("server_pid"))
    )
    json.dump([asdict(result) for result in results], sys.stdout)


if __name__ == "__main__":
    main()
