"""Requirements without a pip download each session (issue 18): the first session builds the
job's requirements into a wheel set and publishes it; every later session mounts it and installs
offline, downloading nothing (counted by the emulator's package index), and the chained job still
ends on the uninterrupted digest. The requirement is a tiny package built here: no test reaches
the internet."""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator.backends.kaggle.backend import kernel_slug, wheelset_slug
from orchestrator.backends.kaggle.findings import WHEEL_SET_CLAIM_SECONDS, WheelSetUsers
from orchestrator.cli.render import segments_table
from orchestrator.wire import SegmentOut
from tests.factories import (
    FINISHED,
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    submit_with_secret,
    wait_finished,
    wheel_file,
)
from tests.kaggle_emulator import Emulator, start_emulator

pytestmark = pytest.mark.slow

REQUIREMENT = "baton-tiny-req"
STEPS_PER_SESSION = 4


def _job(wheel_set: bool) -> dict[str, Any]:
    """Three sessions of 4 steps each, with one requirement."""
    return kaggle_spec(
        {
            "enable_internet": True,
            "requirements": [REQUIREMENT],
            "wheel_set": wheel_set,
            "chain_reserve_seconds": 10.0,
            "keep_versions": 1,
        },
        total_steps=3 * STEPS_PER_SESSION,
        config={"step_sleep": 0.01, "stop_every_steps": STEPS_PER_SESSION},
        session={"limit_seconds": 120, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )


def _emulator(tmp_path: Path) -> AbstractContextManager[Emulator]:
    """The emulator, with a package index that holds the requirement."""
    wheel_file(tmp_path / "pypi", REQUIREMENT, "0.1")
    return start_emulator(
        tmp_path / "kaggle",
        queue_seconds=0.2,
        dataset_processing_seconds=0.3,
        package_index=tmp_path / "pypi",
        package_download_seconds=0.2,
    )


def _chain(tmp_path: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any], Any]:
    """Run the job on the emulator; its committed segments, sessions, and the emulator."""
    with _emulator(tmp_path) as emulator:
        settings = make_settings(tmp_path / "data")
        job_id = submit_with_secret(settings, emulator, spec)
        kernel = f"alice/{kernel_slug(job_id)}"
        with running_api(settings, kaggle_url=emulator.url) as api:
            job = wait_finished(api, job_id, timeout=300)
            assert job["state"] == "succeeded", job
            segments = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        assert emulator.internal_errors == []
        committed = [seg for seg in segments if seg["state"] == "succeeded"]
        return committed, emulator.sessions(kernel), emulator


def test_the_first_session_builds_the_wheel_set_and_later_ones_install_offline(
    tmp_path: Path,
) -> None:
    spec = _job(wheel_set=True)
    committed, _, emulator = _chain(tmp_path, spec)

    assert len(committed) == 3
    assert [seg["timings"]["install_from"] for seg in committed] == ["built", "offline", "offline"]
    assert all(seg["timings"]["install"] > 0 for seg in committed)
    # `baton show` says how each session installed them.
    console = Console(width=200, record=True)
    console.print(segments_table([SegmentOut.model_validate(seg) for seg in committed]))
    rows = console.export_text().splitlines()[1:]
    assert ["built" in rows[0], "offline" in rows[1], "offline" in rows[2]] == [True] * 3
    # Downloaded by session 0 only (resolved, then built): nothing once the set was mounted.
    downloads = emulator.state.packages.downloads
    assert downloads
    assert all(name.startswith("baton_tiny_req-") for name, _ in downloads)
    # (Before segment 1 was pushed: a first session retried under load is still segment 0.)
    pushed = datetime.fromisoformat(committed[1]["launched_at"]).timestamp()
    assert all(at < pushed for _, at in downloads), (downloads, committed[1]["launched_at"])
    # The set was a private dataset of the account, named from the requirements and the image
    # (what sessions 1 and 2 mounted); no other job uses it, so it went with the job.
    assert emulator.dataset(f"alice/{wheelset_slug([REQUIREMENT], None)}") is None
    assert emulator.calls("DeleteDataset")
    # The uninterrupted run: one session, no self-stops (they never touch the model).
    reference = reference_digest({**spec, "config": {}}, tmp_path / "reference")
    assert committed[-1]["checkpoint"]["model_digest"] == reference


def test_without_a_wheel_set_every_session_downloads_its_requirements(tmp_path: Path) -> None:
    """Today's path, kept behind `wheel_set: false`: each session pip-installs from the index."""
    committed, sessions, emulator = _chain(tmp_path, _job(wheel_set=False))

    assert [seg["timings"]["install_from"] for seg in committed] == ["index"] * 3
    downloads = [at for _, at in emulator.state.packages.downloads]
    for session in sessions[: len(committed)]:
        assert any(session.started_at <= at <= session.ended_at for at in downloads), session
    assert emulator.dataset(f"alice/{wheelset_slug([REQUIREMENT], None)}") is None


def test_a_wheel_set_goes_with_the_last_job_of_the_account_that_uses_it(tmp_path: Path) -> None:
    """Retention: a job that ends deletes its wheel set only where no other job of the account
    still uses it. Two jobs with the same requirements: the set outlives the shorter one, whose
    end would otherwise have deleted it under the longer one, and goes with the longer one."""
    slug = f"alice/{wheelset_slug([REQUIREMENT], None)}"
    short = {**_job(wheel_set=True), "total_steps": STEPS_PER_SESSION}
    long = _job(wheel_set=True)
    long["config"] = {**long["config"], "step_sleep": 0.3}
    with _emulator(tmp_path) as emulator:
        settings = make_settings(tmp_path / "data")
        long_id = submit_with_secret(settings, emulator, long)
        short_id = submit_with_secret(settings, emulator, short)
        with running_api(settings, kaggle_url=emulator.url) as api:
            assert wait_finished(api, short_id, timeout=300)["state"] == "succeeded"
            # (One session against three: the longer job is still on its way.)
            assert api.get(f"/api/v1/jobs/{long_id}").json()["state"] not in FINISHED
            assert emulator.dataset(slug) is not None
            assert wait_finished(api, long_id, timeout=300)["state"] == "succeeded"
            segments = api.get(f"/api/v1/jobs/{long_id}/segments").json()
        assert emulator.dataset(slug) is None
        assert emulator.internal_errors == []
    # The longer job's later sessions installed from the set the shorter one's end left alone.
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert committed[-1]["timings"]["install_from"] == "offline"


def test_a_claim_on_a_wheel_set_lapses_a_week_after_the_jobs_last_launch_with_it(
    tmp_path: Path,
) -> None:
    """A job that stopped launching (paused, failed, deleted) stops holding the set: the next
    job to finish with it deletes it. A fresh claim holds it."""
    users = WheelSetUsers(tmp_path, "alice")
    users.claim("baton-wheels-x", "idle")
    users.claim("baton-wheels-x", "busy")
    users.claim("baton-wheels-x", "done")
    now = time.time()
    week_ago = now - WHEEL_SET_CLAIM_SECONDS - 1
    os.utime(users.root / "baton-wheels-x" / "idle", (week_ago, week_ago))
    assert users.claimed_by("done") == ["baton-wheels-x"]
    assert not users.release("baton-wheels-x", "done", now)  # "busy" holds it
    assert users.claimed_by("done") == []
    assert users.release("baton-wheels-x", "busy", now)  # "idle" lapsed
