"""Real-size checkpoints between Kaggle sessions (issue 18): a 200 MB checkpoint that does not
compress moves inside Kaggle, counted by the emulator's links; without internet the job falls
back to the orchestrator's link; a checkpoint that cannot fit is refused before any push."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.factories import (
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    submit_with_secret,
    wait_finished,
)
from tests.kaggle_emulator import Emulator, start_emulator
from worker.boundary.planning import ESTIMATE_PADDING

pytestmark = pytest.mark.slow

MB = 10**6
CHECKPOINT_BYTES = 200 * MB
STEPS_PER_SESSION = 10


def _big_job(internet: bool) -> dict[str, Any]:
    """Three sessions of 10 steps each (each stops itself after 10), every checkpoint holding
    200 MB of random bytes drawn from the seed."""
    kaggle = {"enable_internet": internet, "chain_reserve_seconds": 10.0, "keep_versions": 1}
    return kaggle_spec(
        kaggle,
        total_steps=3 * STEPS_PER_SESSION,
        config={
            "step_sleep": 0.01,
            "stop_every_steps": STEPS_PER_SESSION,
            "random_state_bytes": CHECKPOINT_BYTES,
        },
        session={"limit_seconds": 240, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )


def _reference(spec: dict[str, Any], workdir: Path) -> str:
    """The uninterrupted run: one session, no self-stops, no ballast (it never touches the
    model, so the digest is the same)."""
    config = {k: v for k, v in spec["config"].items() if k == "step_sleep"}
    return reference_digest({**spec, "config": config}, workdir)


@contextmanager
def _kaggle(tmp_path: Path, **costs: float) -> Iterator[tuple[Path, Emulator]]:
    with start_emulator(
        tmp_path / "kaggle",
        queue_seconds=0.2,
        dataset_processing_seconds=0.5,
        # Processing grows with size (here 1 s per 400 MB: Kaggle's figures scaled down).
        dataset_bytes_per_second=400.0 * MB,
        **costs,
    ) as emulator:
        yield tmp_path / "data", emulator
        assert emulator.internal_errors == []


def _run(data: Path, emulator: Emulator, spec: dict[str, Any]) -> list[dict[str, Any]]:
    settings = make_settings(data)
    job_id = submit_with_secret(settings, emulator, spec)
    with running_api(settings, kaggle_url=emulator.url) as api:
        job = wait_finished(api, job_id, timeout=600)
        assert job["state"] == "succeeded", job
        segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    for before, after in pairwise(committed):
        assert after["start_step"] == before["end_step"]
    assert committed[-1]["end_step"] == spec["total_steps"]
    return committed


def _bytes(segment: dict[str, Any]) -> int:
    return sum(entry["bytes"] for entry in segment["checkpoint"]["files"].values())


def test_a_200_mb_checkpoint_moves_inside_kaggle(tmp_path: Path) -> None:
    spec = _big_job(internet=True)
    with _kaggle(tmp_path) as (data, emulator):
        committed = _run(data, emulator, spec)
        through_orchestrator = emulator.link_bytes("orchestrator")
        inside_kaggle = emulator.link_counters("kaggle").uploaded

    assert len(committed) == 3
    assert all(_bytes(seg) > CHECKPOINT_BYTES for seg in committed)
    # Every session published its own checkpoint: 3 x 200 MB went up inside Kaggle...
    assert inside_kaggle >= 3 * CHECKPOINT_BYTES
    # ...and the orchestrator's link carried less than 5 MB per boundary, by the emulator's
    # count, besides the final model, fetched once at the end for `baton download`.
    *boundaries, final = committed
    fetched = final["timings"]["link_bytes"]
    assert fetched >= CHECKPOINT_BYTES
    assert through_orchestrator < 5 * MB * len(committed) + fetched, through_orchestrator
    for seg in committed:
        assert seg["timings"]["transport"] == "kernel"
        assert seg["timings"]["upload"] > 0  # the session's publishing, measured
    assert all(seg["timings"]["link_bytes"] < 5 * MB for seg in boundaries)
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _reference(spec, tmp_path / "reference")


def test_without_internet_the_checkpoint_crosses_the_orchestrator_and_still_matches(
    tmp_path: Path,
) -> None:
    spec = _big_job(internet=False)
    with _kaggle(tmp_path) as (data, emulator):
        committed = _run(data, emulator, spec)
        counters = emulator.link_counters("orchestrator")

    # Today's path: each checkpoint downloaded, and uploaded again for the next session.
    assert counters.downloaded >= 3 * CHECKPOINT_BYTES
    assert counters.uploaded >= 2 * CHECKPOINT_BYTES
    assert [seg["timings"]["transport"] for seg in committed] == ["orchestrator"] * 3
    assert all(seg["timings"]["link_bytes"] >= CHECKPOINT_BYTES for seg in committed)
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _reference(spec, tmp_path / "reference")


def test_a_growing_checkpoint_is_published_inside_every_session(tmp_path: Path) -> None:
    """Sessions run to their deadline while the checkpoint grows by 100 KB a step, uploaded from
    the kernel at 10 MB/s: each segment keeps time for the larger checkpoint it will write (bytes
    over the rate measured before it, the growth between the last two sizes carried forward), not
    the seconds the smaller one before took, so no upload runs into its session's limit (which
    would hand the boundary to the orchestrator's link)."""
    base = 1 * MB
    spec = kaggle_spec(
        {
            "enable_internet": True,
            "chain_reserve_seconds": 10.0,
            "keep_versions": 1,
            "checkpoint_bytes": base,  # the size at step 0: the first growth is measured from it
        },
        total_steps=1000,
        config={
            "step_sleep": 0.1,
            "random_state_bytes": base,
            "random_state_bytes_per_step": 100_000,
        },
        # 2 s of safety: the upload's rate varies with the load on a shared CI machine; a rule
        # that ignored the growth would still be about 3.5 s short in the second session.
        session={"limit_seconds": 60, "margin": {"k_steps": 2.0, "safety_seconds": 2.0}},
    )
    with _kaggle(tmp_path, session_upload_bytes_per_second=10.0 * MB) as (data, emulator):
        committed = _run(data, emulator, spec)

    sizes = [_bytes(seg) for seg in committed]
    assert len(committed) >= 3
    assert sizes == sorted(sizes)
    assert sizes[-1] > 2 * sizes[0]  # it grew
    # Every session published its own checkpoint within its limit.
    assert [seg["timings"]["transport"] for seg in committed] == ["kernel"] * len(committed)
    # Some session took longer to publish than the one before it, padded: the margin a rule of
    # measured seconds would have kept for it, too short.
    uploads = [seg["timings"]["upload"] for seg in committed]
    assert any(after > ESTIMATE_PADDING * before for before, after in pairwise(uploads)), uploads
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _reference(spec, tmp_path / "reference")


def test_an_upload_that_outlasts_its_session_is_abandoned_and_the_checkpoint_kept(
    tmp_path: Path,
) -> None:
    """The first session keeps 2 s for publishing (nothing measured yet) and runs to its
    deadline; its 50 MB take 10 s to upload at 5 MB/s. The session stops waiting for the upload
    at its deadline and exits in time, so its output, checkpoint included, survives, and that
    boundary takes the orchestrator's link; a session killed mid-upload would lose both."""
    spec = kaggle_spec(
        {"enable_internet": True, "chain_reserve_seconds": 2.0, "keep_versions": 1},
        total_steps=400,
        config={"step_sleep": 0.1, "random_state_bytes": 50 * MB},
        session={"limit_seconds": 30, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with _kaggle(tmp_path, session_upload_bytes_per_second=5.0 * MB) as (data, emulator):
        committed = _run(data, emulator, spec)

    first = committed[0]
    assert first["outcome"] == "deadline"  # it ran to its deadline and reported
    assert first["timings"]["transport"] == "orchestrator"
    assert first["timings"]["link_bytes"] >= 50 * MB
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _reference(spec, tmp_path / "reference")


@pytest.mark.parametrize(
    ("kaggle", "config", "field", "fix"),
    [
        # A user's trainer, with the size its author expects.
        ({"checkpoint_bytes": 25 * 10**9}, {}, "checkpoint_bytes", "20 GB /kaggle/working"),
        # A Baton LM trainer: a 3B model with Adam, full fine-tuning (the planner's sizes).
        (
            {},
            {
                "model_params": 3_000_000_000,
                "zero_stage": 3,
                "offload": "optimizer+params",
                "gradient_checkpointing": True,
            },
            "config",
            "LoRA adapters only",
        ),
        # Fits the session, not 11 copies in 100 GB of private storage.
        ({"checkpoint_bytes": 15 * 10**9, "keep_versions": 10}, {}, "keep_versions", "to 5"),
    ],
)
def test_a_checkpoint_that_cannot_fit_is_refused_before_any_push(
    tmp_path: Path, kaggle: dict[str, Any], config: dict[str, Any], field: str, fix: str
) -> None:
    spec = kaggle_spec(kaggle)
    if config:
        spec = {**spec, "trainer": "trainers.deepspeed_lm:DeepSpeedCausalLM", "nproc": 2}
        spec["config"] = config
    with _kaggle(tmp_path) as (data, emulator):
        with running_api(make_settings(data), kaggle_url=emulator.url) as api:
            api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
            response = api.post("/api/v1/jobs", json=spec)
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        assert error["loc"][-1] == field
        assert fix in error["msg"]
        # Nothing was pushed or published: no session, no quota, no storage.
        assert emulator.push_counts == {}
        assert emulator.calls("SaveKernel") == []
        assert emulator.calls("CreateDataset") == []
