"""Jobs on the Kaggle backend, through the official client, against the Kaggle API emulator."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.backends.kaggle.backend import dataset_slug, kernel_slug
from orchestrator.config import Settings
from tests.factories import (
    FINISHED,
    event_kinds,
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    submit_with_secret,
    wait_finished,
    wait_for,
)
from tests.kaggle_emulator import Emulator, FaultKind, JumpClock, start_emulator
from tests.kaggle_emulator.kernel_sessions import KernelSession, WorkerStatus
from tests.kaggle_emulator.quota import QuotaWeek, used_seconds
from tests.support.marks import starts_processes
from worker.kaggle_access.kernel_script import launch_id_of

pytestmark = pytest.mark.slow


def _segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


def test_kaggle_job_chains_kernels_to_the_local_digest(
    kaggle_api: TestClient,
    emulator: Emulator,
    settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    spec = kaggle_spec()
    job_id = kaggle_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(kaggle_api, job_id, timeout=300)
    assert job["state"] == "succeeded", job

    segments = _segments(kaggle_api, job_id)
    # On a loaded machine a session may hit its limit before its first step (a slow torch
    # import): that segment fails, leaves no output, and is retried from the last checkpoint.
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert len(committed) >= 2
    assert all(seg["outcome"] == "lost" for seg in segments if seg["state"] != "succeeded")
    for before, after in pairwise(committed):
        assert after["start_step"] == before["end_step"]
    assert committed[-1]["end_step"] == 500

    kernel = f"alice/{kernel_slug(job_id)}"
    assert emulator.push_counts[kernel] == len(segments)
    # Every committed segment but the last was published once, for its successor to mount, each
    # checkpoint as a dataset of its own (retention deletes all but the newest keep_versions).
    assert len(emulator.calls("CreateDataset")) == len(committed) - 1

    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")

    log = kaggle_api.get(f"/api/v1/jobs/{job_id}/segments/{committed[0]['index']}/log")
    assert "committed checkpoint" in log.text
    # The Kaggle key went nowhere but into the client's auth header.
    key = "alice-key"
    assert all(key not in session.script for session in emulator.sessions(kernel))
    assert key not in caplog.text
    responses = [
        kaggle_api.get(f"/api/v1/jobs/{job_id}{path}") for path in ("", "/segments", "/events")
    ]
    assert all(key not in response.text for response in responses)
    database = settings.data_dir / "baton.db"
    assert key.encode() not in database.read_bytes() + Path(f"{database}-wal").read_bytes()


@pytest.fixture
@starts_processes
def flaky_kaggle(tmp_path: Path) -> Iterator[tuple[TestClient, Emulator]]:
    """10 % of emulator calls fail (429, 500, dropped after longer than Baton's call timeout)."""
    settings = make_settings(tmp_path / "data", kaggle_call_timeout_seconds=1.0)
    with start_emulator(
        tmp_path / "kaggle", queue_seconds=0.2, dataset_processing_seconds=0.5
    ) as emulator:
        emulator.faults.hang_seconds = 1.5
        with running_api(settings, kaggle_url=emulator.url) as api:
            api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
            emulator.faults.reseed(11)
            emulator.faults.rate = 0.1
            # Every kind at least once, however few calls a fast run makes: a status read
            # answered 429, one answered 500, one dropped after the call timeout...
            for kind in (FaultKind.RATE_LIMITED, FaultKind.SERVER_ERROR, FaultKind.DROP):
                emulator.faults.fail_next("GetKernelSessionStatus", kind)
            # ...and one push that starts its session but loses its response.
            emulator.faults.fail_next("SaveKernel", FaultKind.LOST_RESPONSE)
            yield api, emulator


def test_flaky_kaggle_api_never_pushes_a_segment_twice(
    flaky_kaggle: tuple[TestClient, Emulator],
) -> None:
    api, emulator = flaky_kaggle
    job_id = api.post("/api/v1/jobs", json=kaggle_spec(total_steps=250)).json()["id"]
    job = wait_finished(api, job_id, timeout=400)
    assert job["state"] == "succeeded", job
    injected = {kind for _, kind in emulator.faults.injected}
    assert {FaultKind.RATE_LIMITED, FaultKind.SERVER_ERROR, FaultKind.DROP} <= injected
    assert FaultKind.LOST_RESPONSE in injected

    segments = _segments(api, job_id)
    sessions = emulator.sessions(f"alice/{kernel_slug(job_id)}")
    pushes = Counter(launch_id_of(session.script) for session in sessions)
    launch_ids = {f"{job_id}-{seg['index']:04d}" for seg in segments}
    assert pushes == dict.fromkeys(launch_ids, 1)


WEEK = 7 * 24 * 3600.0
GPU_ALLOWANCE = 30.0


def _positions(kinds: list[str], kind: str) -> list[int]:
    return [index for index, each in enumerate(kinds) if each == kind]


def _timestamp(iso: str | None) -> float:
    return datetime.fromisoformat(iso).timestamp() if iso else 0.0


def _done_or_parked_after(refresh: float, job: dict[str, Any]) -> bool:
    """Finished, or parked again for a refresh later than `refresh`."""
    later = job["state"] == "waiting" and _timestamp(job["wait_until"]) > refresh
    return job["state"] in FINISHED or later


def _quota_left_at_each_push(sessions: list[KernelSession], week: QuotaWeek) -> list[float]:
    """GPU seconds the week had left when each session was pushed (they run one at a time)."""
    left = []
    for index, session in enumerate(sessions):
        earlier = [(s.started_at or s.queued_at, s.ended_at) for s in sessions[:index]]
        start = week.start(session.queued_at)
        left.append(GPU_ALLOWANCE - used_seconds(earlier, start, session.queued_at))
    return left


def test_spent_quota_parks_the_job_until_the_refresh(tmp_path: Path) -> None:
    # 30 s of GPU a week, and 32 s of training (plus each session's start-up, which counts in
    # the quota): the job must wait for the next week. The emulator and the engine share one
    # clock, and the week ends only when the test jumps it past the refresh.
    clock = JumpClock()
    week = QuotaWeek(clock.now(), WEEK)
    with (
        start_emulator(
            tmp_path / "kaggle",
            queue_seconds=0.2,
            dataset_processing_seconds=0.5,
            clock=clock,
            week_epoch=week.epoch,
            week_seconds=WEEK,
            gpu_allowance_seconds=GPU_ALLOWANCE,
        ) as emulator,
        running_api(
            make_settings(tmp_path / "data"), kaggle_url=emulator.url, clock=clock.utcnow
        ) as api,
    ):
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        job_id = api.post("/api/v1/jobs", json=kaggle_spec(total_steps=800)).json()["id"]
        kernel = f"alice/{kernel_slug(job_id)}"
        parked = {"waiting", *FINISHED}
        waiting = wait_for(api, job_id, lambda job: job["state"] in parked, timeout=180)
        assert waiting["state"] == "waiting", waiting
        first_refresh = week.refresh_time(week.epoch)

        # However often the engine looks before the refresh, the job stays parked: no push, and
        # no event (a wake that parks again would leave quota_refreshed, quota_exhausted).
        pushed, kinds = len(emulator.sessions(kernel)), event_kinds(api, job_id)
        engine = api.app.state.services.engine  # type: ignore[attr-defined]
        for _ in range(5):
            engine.reconcile_job(job_id)
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "waiting"
        assert event_kinds(api, job_id) == kinds
        assert len(emulator.sessions(kernel)) == pushed

        # Jump to each refresh the job waits for. One week is enough on a fast machine; where
        # the sessions' start-up eats more of the allowance, the job parks again a week on.
        refreshes: list[float] = []
        while waiting["state"] == "waiting" and len(refreshes) < 4:
            refresh = week.refresh_time(clock.now())
            assert _timestamp(waiting["wait_until"]) == pytest.approx(refresh, abs=1)
            clock.advance(refresh - clock.now() + 1)
            refreshes.append(refresh)
            waiting = wait_for(api, job_id, partial(_done_or_parked_after, refresh), timeout=300)
        assert waiting["state"] == "succeeded", waiting
        kinds = event_kinds(api, job_id)
        assert kinds.count("quota_exhausted") == kinds.count("quota_refreshed") == len(refreshes)
        for exhausted, refreshed in zip(
            _positions(kinds, "quota_exhausted"), _positions(kinds, "quota_refreshed"), strict=True
        ):
            assert exhausted < refreshed
        sessions = emulator.sessions(kernel)
        assert all(s.queued_at >= first_refresh for s in sessions[pushed:])
        assert len(sessions) > pushed
        # No session was ever sized beyond what the quota had left.
        for session, left in zip(sessions, _quota_left_at_each_push(sessions, week), strict=True):
            assert session.limit_seconds <= left + 0.01, (session, left)


def _chain_completed(emulator: Emulator, job_id: str) -> bool:
    """The job's own state says it is done: its last segment published a `completed` result,
    and that segment's session has ended."""
    dataset = emulator.dataset(f"alice/{dataset_slug(job_id)}")
    sessions = emulator.sessions(f"alice/{kernel_slug(job_id)}")
    if dataset is None or not sessions or sessions[-1].ended_at is None:
        return False
    results = sorted(dataset.versions[-1].directory.glob("result-s*.json"))
    return bool(results) and json.loads(results[-1].read_text())["outcome"] == "completed"


def test_self_chained_job_completes_while_the_orchestrator_is_stopped(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    # The chain alone: its kernels do not also listen on the control channel, whose client
    # start-up would share the 25 s sessions' CPU on a loaded 2-core machine (the channel has
    # its own tests, tests/orchestrator/backends/kaggle/test_control.py).
    spec = kaggle_spec(
        {
            "self_chain": True,
            "enable_internet": True,
            "chain_reserve_seconds": 8,
            "control_poll_seconds": 0,
        },
        total_steps=400,
        session={"limit_seconds": 25, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with start_emulator(
        tmp_path / "kaggle", queue_seconds=0.2, dataset_processing_seconds=0.5
    ) as emulator:
        job_id = submit_with_secret(settings, emulator, spec)
        kernel = f"alice/{kernel_slug(job_id)}"

        with running_api(settings, kaggle_url=emulator.url) as api:
            wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        # The orchestrator is gone; the chain goes on by itself until the job is done.
        deadline = time.monotonic() + 240
        while not _chain_completed(emulator, job_id):
            assert time.monotonic() < deadline, "the chain did not finish"
            time.sleep(0.5)
        sessions = emulator.sessions(kernel)
        assert len(sessions) >= 2

        with running_api(settings, kaggle_url=emulator.url) as api:
            job = wait_finished(api, job_id, timeout=120)
            assert job["state"] == "succeeded", job
            segments = _segments(api, job_id)

    assert [seg["state"] for seg in segments] == ["succeeded"] * len(sessions)
    for before, after in pairwise(segments):
        assert after["start_step"] == before["end_step"]
    assert segments[-1]["end_step"] == 400
    pushes = Counter(launch_id_of(session.script) for session in sessions)
    assert pushes == {f"{job_id}-{seg['index']:04d}": 1 for seg in segments}
    # The key reached the kernels only through the attached secret, never through their source.
    assert not any("alice-key" in session.script for session in sessions)
    final = segments[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")


def test_a_stale_checkpoint_version_is_rejected_never_resumed_from(
    kaggle_api: TestClient, emulator: Emulator, tmp_path: Path
) -> None:
    # The first kernel that names version 2 or later is handed the version before it. Only a
    # job that keeps every checkpoint in one dataset (keep_versions 0) has a version before.
    emulator.faults.stale_mounts = 1
    spec = kaggle_spec({"keep_versions": 0}, total_steps=1000)
    job_id = kaggle_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(kaggle_api, job_id, timeout=480)
    assert job["state"] == "succeeded", job
    assert ("mount", FaultKind.STALE_MOUNT) in emulator.faults.injected

    segments = _segments(kaggle_api, job_id)
    [stale] = [seg for seg in segments if seg["state"] == "failed"]
    assert stale["outcome"] == "rejected"
    assert "not the expected one" in stale["error"]
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    for before, after in pairwise(committed):
        assert after["start_step"] == before["end_step"]
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")


def test_cancelling_a_job_cannot_stop_its_kaggle_session_and_says_so(
    kaggle_api: TestClient, emulator: Emulator
) -> None:
    spec = kaggle_spec(total_steps=100_000, session={"limit_seconds": 120})
    job_id = kaggle_api.post("/api/v1/jobs", json=spec).json()["id"]
    kernel = f"alice/{kernel_slug(job_id)}"

    def kernel_running(job: dict[str, Any]) -> bool:
        sessions = emulator.sessions(kernel)
        return bool(sessions) and sessions[-1].status is WorkerStatus.RUNNING

    wait_for(kaggle_api, job_id, kernel_running, timeout=60)
    assert kaggle_api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"

    def segment_ended(_: dict[str, Any]) -> bool:
        return [seg["state"] for seg in _segments(kaggle_api, job_id)] != ["running"]

    wait_for(kaggle_api, job_id, segment_ended, timeout=30)
    # Kaggle exposes no session id, so nothing was asked of CancelKernelSession: the session
    # runs on until its own limit (or until its owner stops it on kaggle.com), its slot still
    # counted, and the user is told so.
    assert [seg["state"] for seg in _segments(kaggle_api, job_id)] == ["cancelling"]
    assert emulator.calls("CancelKernelSession") == []
    assert emulator.sessions(kernel)[-1].status is WorkerStatus.RUNNING
    events = kaggle_api.get(f"/api/v1/jobs/{job_id}/events").json()
    assert any("may keep running" in (event.get("message") or "") for event in events)


def test_a_third_gpu_job_starts_only_once_a_cancelled_session_has_ended(
    kaggle_api: TestClient, emulator: Emulator
) -> None:
    spec = kaggle_spec(total_steps=100_000, session={"limit_seconds": 25})
    ids = [
        kaggle_api.post("/api/v1/jobs", json=spec | {"name": f"gpu-{n}"}).json()["id"]
        for n in range(3)
    ]

    def states() -> list[str]:
        return [kaggle_api.get(f"/api/v1/jobs/{job_id}").json()["state"] for job_id in ids]

    wait_for(kaggle_api, ids[0], lambda _: states().count("running") == 2, timeout=60)
    [waiting] = [job_id for job_id, state in zip(ids, states(), strict=True) if state == "queued"]
    assert _segments(kaggle_api, waiting) == []

    first = next(job_id for job_id in ids if job_id != waiting)
    kaggle_api.post(f"/api/v1/jobs/{first}/cancel")
    [cancelled_session] = emulator.sessions(_kernel(first))

    def still_waiting(_: dict[str, Any]) -> bool:
        # While the cancelled session runs on, its slot counts: nothing is launched.
        if cancelled_session.ended_at is None:
            assert _segments(kaggle_api, waiting) == []
            return False
        return True

    wait_for(kaggle_api, waiting, still_waiting, timeout=90)
    wait_for(kaggle_api, waiting, lambda job: job["state"] == "running", timeout=90)
    wait_for(kaggle_api, waiting, lambda _: bool(emulator.sessions(_kernel(waiting))), timeout=60)
    third = emulator.sessions(_kernel(waiting))[0]

    def third_started(_: dict[str, Any]) -> bool:
        return third.started_at is not None

    wait_for(kaggle_api, waiting, third_started, timeout=60)
    # Kaggle ran two GPU sessions at most: the third began after the cancelled one ended.
    assert cancelled_session.ended_at is not None
    assert third.started_at is not None
    assert third.started_at >= cancelled_session.ended_at
    for job_id in ids:
        kaggle_api.post(f"/api/v1/jobs/{job_id}/cancel")


def _kernel(job_id: str) -> str:
    return f"alice/{kernel_slug(job_id)}"
