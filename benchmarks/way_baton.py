"""Way (b): the job submitted to Baton's REST API, chained over time-limited local sessions.

Runs what `baton serve` runs, in this process: prestart (migrations, admin token), the app with
its embedded reconcile loop under a real uvicorn server on a loopback port, default settings
(reconcile every 1 s, 5 s kill grace). The job goes in and comes out over HTTP.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.api_server import served_api
from benchmarks.records import SessionRecord, WayResult
from benchmarks.workload import Workload, job_spec
from orchestrator.config import Settings

KEY, TITLE = "b", "Baton (chained)"
TRAINER_PACKAGES = "trainers,benchmarks"
TOKEN = "bt_benchmark-admin-token-0123456789abcdef"
FINISHED = {"succeeded", "failed", "cancelled"}
_POLL_SECONDS = 0.1
_LOGGED_STEP = re.compile(r"step (\d+)/")


@contextmanager
def serving(data_dir: Path) -> Iterator[tuple[httpx.Client, Settings]]:
    """`baton serve` in a thread: yields an authenticated client for it."""
    # The workload's trainer is in this package: allowed the way an operator allows theirs
    # (BATON_TRAINER_PACKAGES), beside the default `trainers`.
    settings = Settings(data_dir=data_dir, admin_token=TOKEN, trainer_packages=TRAINER_PACKAGES)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with served_api(settings) as url, httpx.Client(base_url=url, headers=headers) as client:
        yield client, settings


def _lost_session(segment: dict[str, Any], sessions_dir: Path, job_id: str) -> SessionRecord:
    """A segment without a result: what its log says it trained, all of it lost."""
    log = sessions_dir / f"{job_id}-{segment['index']:04d}" / "log.txt"
    logged = _LOGGED_STEP.findall(log.read_text(errors="replace")) if log.exists() else []
    trained_to = int(logged[-1]) if logged else segment["start_step"]
    return SessionRecord(
        wall=segment["limit_seconds"],
        first_step=None,
        load=0.0,
        train=0.0,
        saves=[],
        start_step=segment["start_step"],
        trained_to=trained_to,
        kept_to=segment["start_step"],
        outcome=segment["outcome"] or segment["state"],
    )


def _session(segment: dict[str, Any], sessions_dir: Path, job_id: str) -> SessionRecord:
    timings = segment["timings"]
    if segment["end_step"] is None or not timings:
        return _lost_session(segment, sessions_dir, job_id)
    return SessionRecord(
        wall=timings["session"] or timings["total"],
        first_step=timings["startup"] + timings["load"],
        load=timings["load"],
        train=timings["train"],
        saves=[timings["save"]],
        start_step=segment["start_step"],
        trained_to=segment["end_step"],  # the worker commits after its last step
        kept_to=segment["end_step"],
        outcome=segment["outcome"],
    )


def run(workload: Workload, workdir: Path, timeout: float = 600) -> WayResult:
    with serving(workdir / "baton") as (client, settings):
        started = time.time()
        response = client.post("/api/v1/jobs", json=job_spec(workload))
        response.raise_for_status()
        job_id = response.json()["id"]
        while (job := client.get(f"/api/v1/jobs/{job_id}").json())["state"] not in FINISHED:
            if time.time() - started > timeout:
                client.post(f"/api/v1/jobs/{job_id}/cancel")
                raise RuntimeError(f"Baton job {job_id} did not finish in {timeout} s")
            time.sleep(_POLL_SECONDS)
        total_wall = time.time() - started
        segments = client.get(f"/api/v1/jobs/{job_id}/segments").json()
    sessions = [_session(segment, settings.sessions_dir, job_id) for segment in segments]
    final = next((s["checkpoint"] for s in reversed(segments) if s["checkpoint"]), None)
    notes = [f"job {job['state']}" + (f": {job['reason']}" if job["reason"] else "")]
    gaps = [
        _seconds_between(before["ended_at"], after["launched_at"])
        for before, after in itertools.pairwise(segments)
    ]
    return WayResult(
        KEY,
        TITLE,
        sessions,
        total_wall,
        final["step"] if final else 0,
        final["model_digest"] if final else None,
        notes=notes,
        extra={
            "limit": workload.session_seconds,
            "gaps_between_sessions": gaps,
            "outcomes": [s["outcome"] for s in segments],
        },
    )


def _seconds_between(earlier: str | None, later: str | None) -> float | None:
    if earlier is None or later is None:
        return None
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()
