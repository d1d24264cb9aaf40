"""Jobs meeting what a real Kaggle account does on first contact (issue 17), end to end through
the API, the official client and the emulator with each first-contact switch on."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kaggle.backend import dataset_slug, kernel_slug
from tests.factories import (
    FAST_EMULATOR,
    FINISHED,
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    wait_finished,
)
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import account_on
from worker.boundary.version_layout import split_flat
from worker.kaggle_access.kernel_script import launch_id_of
from worker.kaggle_access.kernels import JobKernel, KernelPush

pytestmark = pytest.mark.slow


def _segments(api: Any, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


def _run_job(
    tmp_path: Path, spec: dict[str, Any], before: Any = None, **options: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], Emulator]:
    with start_emulator(tmp_path / "kaggle", **(FAST_EMULATOR | options)) as emulator:
        if before is not None:
            before(emulator)
        with running_api(make_settings(tmp_path / "data"), kaggle_url=emulator.url) as api:
            api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
            job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
            job = wait_finished(api, job_id, timeout=400)
            return job, _segments(api, job_id), emulator


def _one_session_per_segment(emulator: Emulator, job_id: str, segments: list[Any]) -> None:
    launched = Counter(launch_id_of(s.script) for s in emulator.sessions())
    launched.pop(None, None)
    assert launched == dict.fromkeys((f"{job_id}-{seg['index']:04d}" for seg in segments), 1)


def test_a_refused_first_push_leaves_a_shell_and_the_job_completes_under_a_fresh_slug(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release-the-gpus"

    def own_notebooks_hold_the_gpu_cap(emulator: Emulator) -> None:
        # The user's own notebooks hold both GPUs until the job's first push has been refused
        # (and left its shell), whatever the machine's speed; then they end.
        alice = account_on(emulator)
        for name in ("own-1", "own-2"):
            JobKernel(alice, name).push(
                f"import os, time\nwhile not os.path.exists({str(release)!r}):\n"
                "    time.sleep(0.2)\n",
                KernelPush("NvidiaTeslaT4", 300, False, True, [], [], [], None),
            )

        def release_after_the_refusal() -> None:
            deadline = time.monotonic() + 300
            while not emulator.shells and time.monotonic() < deadline:
                time.sleep(0.2)
            release.touch()

        threading.Thread(target=release_after_the_refusal, daemon=True).start()

    spec = kaggle_spec()
    job, segments, emulator = _run_job(
        tmp_path, spec, own_notebooks_hold_the_gpu_cap, refused_push_leaves_shell=True
    )
    assert job["state"] == "succeeded", job
    job_id = job["id"]
    first = f"alice/{kernel_slug(job_id)}"
    assert first in emulator.shells  # the refused first push left it empty
    assert emulator.sessions(first) == []
    used = {s.kernel_ref for s in emulator.sessions() if s.kernel_ref.startswith(first)}
    assert len(used) == 1
    assert used.pop().startswith(f"{first}-r")
    _one_session_per_segment(emulator, job_id, segments)
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")


def test_sessions_cut_at_their_limit_hand_on_their_committed_checkpoints(tmp_path: Path) -> None:
    # The job plans 20 s sessions; Kaggle cuts them at 12 s (it enforces its own limit), before
    # the 12 s of training is done. Each cut session commits on SIGTERM and keeps its output.
    spec = kaggle_spec(total_steps=300)
    job, segments, emulator = _run_job(
        tmp_path, spec, cut_keeps_output=True, max_session_seconds=12, grace_seconds=5
    )
    assert job["state"] == "succeeded", job
    sessions = emulator.sessions(f"alice/{kernel_slug(job['id'])}")
    cut = [s for s in sessions if s.status is WorkerStatus.CANCEL_ACKNOWLEDGED]
    assert cut, [s.status for s in sessions]
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert len(committed) >= 2
    for before, after in itertools.pairwise(committed):
        assert after["start_step"] == before["end_step"]
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")


def test_a_t4_job_on_an_account_without_phone_verification_fails_at_its_first_push(
    tmp_path: Path,
) -> None:
    job, segments, emulator = _run_job(tmp_path, kaggle_spec(), phone_verified=False)
    assert job["state"] == "failed", job
    assert "phone" in job["reason"]
    assert "consecutive failed segments" not in job["reason"]
    assert len(segments) == 1
    assert emulator.push_counts == {}


def test_a_create_that_answered_500_is_adopted_and_the_job_completes(tmp_path: Path) -> None:
    def create_answers_500(emulator: Emulator) -> None:
        emulator.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)

    spec = kaggle_spec()
    job, segments, emulator = _run_job(tmp_path, spec, create_answers_500)
    assert job["state"] == "succeeded", job
    assert (("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)) in emulator.faults.injected
    # Every checkpoint was uploaded once: each of its files once, and one dataset per
    # checkpoint, the first create's answer a 500 that was waited out, not sent again.
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    uploaded = emulator.state.blobs.started_names()
    assert len(uploaded) == len(set(uploaded))
    checkpoints = {flat[0] for flat in map(split_flat, uploaded) if flat is not None}
    assert len(checkpoints) == len(committed) - 1
    assert len(emulator.calls("CreateDataset")) == len(committed) - 1


def test_retention_over_ten_segments_keeps_the_newest_and_a_finished_job_only_its_final(
    tmp_path: Path,
) -> None:
    # 10 sessions whatever the machine's speed (each stops itself after 30 steps and commits),
    # so 9 published checkpoints of which 2 are kept at a time. Once the first checkpoint is
    # stored, the account's private storage holds 3 and a half of them.
    spec = kaggle_spec(
        {"keep_versions": 2},
        total_steps=300,
        config={"step_sleep": 0.02, "stop_every_steps": 30},
        session={"limit_seconds": 90, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    stored: list[int] = []
    with start_emulator(tmp_path / "kaggle", **FAST_EMULATOR) as emulator:
        with running_api(make_settings(tmp_path / "data"), kaggle_url=emulator.url) as api:
            api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
            job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
            deadline = time.monotonic() + 300
            while not emulator.peak_private_bytes():
                job = api.get(f"/api/v1/jobs/{job_id}").json()
                assert job["state"] not in FINISHED, (job.get("reason"), _segments(api, job_id))
                assert time.monotonic() < deadline, _segments(api, job_id)
                time.sleep(0.2)
            size = emulator.peak_private_bytes()
            emulator.set_private_storage(size * 7 // 2)
            deadline = time.monotonic() + 900
            while (job := api.get(f"/api/v1/jobs/{job_id}").json())["state"] not in FINISHED:
                stored.append(len(_checkpoint_datasets(emulator, job_id)))
                assert time.monotonic() < deadline, job
                time.sleep(0.5)
            segments = _segments(api, job_id)
            listed = api.get(
                f"/api/v1/jobs/{job_id}/checkpoints", params={"include_pruned": "true"}
            ).json()
        assert job["state"] == "succeeded", (job.get("reason"), [s.get("error") for s in segments])
        assert emulator.peak_private_versions() <= 3
        assert max(stored) <= 3
        assert emulator.peak_private_bytes() <= size * 7 // 2
        assert len(emulator.calls("CreateDataset")) >= 9
        # Done: nothing of the job is left on Kaggle; Baton's store keeps the final checkpoint.
        assert _checkpoint_datasets(emulator, job_id) == []
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert len(committed) == 10
    assert [row["kept"] for row in listed] == [False] * 9 + [True]
    assert listed[-1]["step"] == 300
    final = committed[-1]["checkpoint"]["model_digest"]
    # The uninterrupted run trains the same 300 steps without stopping itself every 30.
    uninterrupted = spec | {"config": {"step_sleep": spec["config"]["step_sleep"]}}
    assert final == reference_digest(uninterrupted, tmp_path / "reference")


def _checkpoint_datasets(emulator: Emulator, job_id: str) -> list[str]:
    with emulator.state.lock:
        return [
            d.slug for d in emulator.state.datasets.all() if d.slug.startswith(dataset_slug(job_id))
        ]
