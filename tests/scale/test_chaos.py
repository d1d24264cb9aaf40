"""Chaos: kill -9 the API, workers and beat at random moments and restart Redis; nothing is lost
or done twice.

A multi-segment local job and a Kaggle-emulator job run under the compose process layout (API,
two Celery workers, beat) on PostgreSQL and a private Redis. While they run, a seeded random
process is killed with SIGKILL and restarted, KILLS times, and Redis is killed and restarted
twice (it keeps nothing: every queued message and dispatch guard is lost). Then both jobs must
succeed with every segment launched exactly once, contiguous steps, and the final model_digest
of an uninterrupted run. Bounded in count (kills, restarts) and in time (every wait has a limit).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from orchestrator.backends.kaggle.backend import kernel_slug
from orchestrator.backends.local.sessions import SessionState, session_state
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES
from orchestrator.models import Checkpoint, Job, Segment
from tests.factories import FINISHED, job_spec, kaggle_spec, reference_digest
from tests.scale.cluster import REPO_ROOT, ScaleRig
from worker.boundary.paths import LOG_FILE
from worker.kaggle_access.checkpoints import VISIBLE_WITHIN_SECONDS
from worker.kaggle_access.kernel_script import launch_id_of

# A kill -9 between recording an upload and Kaggle's answer leaves Baton unable to tell whether
# the create took effect: it waits VISIBLE_WITHIN_SECONDS for it to appear before it sends again,
# never twice at once (worker/kaggle_access/checkpoints.py). The jobs' wait and the test's limit
# leave room for that wait once; a run that no kill lands in that window ends in about 2 min.
FINISH_WITHIN_SECONDS = VISIBLE_WITHIN_SECONDS + 600

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(FINISH_WITHIN_SECONDS + 600),
]

KILLS = 24
REDIS_RESTART_AFTER_KILLS = (8, 16)
VICTIMS = ("api", "worker-1", "worker-2", "beat")
# 80 s of steps in 60 s sessions: at least two segments on any machine, and at least ~90 s of
# wall time, so the faults land while the jobs run however fast the machine is. On a loaded
# 2-core machine Python and torch take ~20 s to start, so the sessions are long enough to
# still make progress there (about four segments).
SESSION = {"limit_seconds": 60, "margin": {"k_steps": 2.0, "safety_seconds": 1.0}}
LOCAL = job_spec(name="chaos", total_steps=1600, config={"step_sleep": 0.05}, session=SESSION)
KAGGLE = kaggle_spec(name="chaos", total_steps=1600, config={"step_sleep": 0.05}, session=SESSION)


def _jobs(session: Session) -> dict[str, Job]:
    return {job.id: job for job in session.scalars(select(Job))}


def test_kill_9_and_redis_restarts_lose_and_double_nothing(rig: ScaleRig, tmp_path: Path) -> None:
    # The uninterrupted run, alongside (it is the same run for both jobs: the Kaggle spec
    # differs only in where it runs).
    references = ThreadPoolExecutor(max_workers=1)
    reference = references.submit(reference_digest, LOCAL, tmp_path / "reference")

    with rig.cluster.client() as client:
        stored = client.put(
            "/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"}
        )
        assert stored.status_code == 200, stored.text
        local = client.post("/api/v1/jobs", json=LOCAL).json()["id"]
        kaggle = client.post("/api/v1/jobs", json=KAGGLE).json()["id"]

    database = create_engine(rig.database_url)
    chance = random.Random(20261122)
    kills_while_running = 0
    try:
        for kill in range(1, KILLS + 1):
            time.sleep(chance.uniform(0.2, 1.5))  # a random moment; no correctness hangs on it
            victim = chance.choice(VICTIMS)
            rig.cluster.kill(victim)
            with Session(database) as session:
                running = any(job.state not in FINISHED for job in _jobs(session).values())
            kills_while_running += running
            time.sleep(chance.uniform(0.0, 1.0))
            rig.cluster.start(victim)
            if victim == "api":
                rig.cluster.wait_for_api()
            if kill in REDIS_RESTART_AFTER_KILLS:
                rig.redis.restart()

        deadline = time.monotonic() + FINISH_WITHIN_SECONDS
        while True:
            with Session(database) as session:
                jobs = _jobs(session)
                if all(job.state in FINISHED for job in jobs.values()):
                    break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"jobs not finished: {[(j.id, j.state) for j in jobs.values()]}"
                )
            time.sleep(0.5)

        with Session(database) as session:
            jobs = _jobs(session)
            segments = {
                job_id: list(
                    session.scalars(
                        select(Segment).where(Segment.job_id == job_id).order_by(Segment.index)
                    )
                )
                for job_id in (local, kaggle)
            }
            digests = {
                job_id: session.scalars(
                    select(Checkpoint.model_digest)
                    .where(Checkpoint.job_id == job_id)
                    .order_by(Checkpoint.step.desc())
                ).first()
                for job_id in (local, kaggle)
            }
            live_segments = session.scalar(
                select(Segment.id).where(
                    Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES])
                )
            )
    except AssertionError:
        print(rig.cluster.log_tail())
        raise
    finally:
        database.dispose()

    assert rig.redis.restarts == 2
    assert sum(rig.cluster.kills.values()) == KILLS
    assert kills_while_running >= 20
    assert {job.state for job in jobs.values()} == {"succeeded"}, {
        job.id: (job.state, job.reason) for job in jobs.values()
    }
    assert live_segments is None

    for job_id in (local, kaggle):
        done = [seg for seg in segments[job_id] if seg.state == "succeeded"]
        assert len(done) >= 2, _describe(segments[job_id])
        assert done[0].start_step == 0
        for before, after in pairwise(done):
            assert after.start_step == before.end_step, _describe(segments[job_id])
        assert done[-1].end_step == 1600

    _assert_each_local_segment_ran_once(rig, local, segments[local])
    _assert_each_kaggle_segment_pushed_once(rig, kaggle, segments[kaggle])

    expected = reference.result(timeout=300)
    references.shutdown()
    assert digests == {local: expected, kaggle: expected}
    _assert_both_workers_answer_ping(rig)


def _assert_both_workers_answer_ping(rig: ScaleRig) -> None:
    """The operator's view (README): the restarted workers answer `celery inspect ping`."""
    ping = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "orchestrator.tasks", "inspect", "ping"],
        cwd=REPO_ROOT,
        env=rig.cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ping.returncode == 0, ping.stderr
    host = os.uname().nodename
    assert f"w1@{host}" in ping.stdout
    assert f"w2@{host}" in ping.stdout


def _describe(segments: list[Segment]) -> list[tuple[Any, ...]]:
    return [(s.index, s.state, s.start_step, s.end_step, s.error) for s in segments]


def _assert_each_local_segment_ran_once(
    rig: ScaleRig, job_id: str, segments: list[Segment]
) -> None:
    sessions = rig.cluster.root / "data" / "sessions"
    roots = sorted(path.name for path in sessions.glob(f"{job_id}-*"))
    assert roots == sorted(seg.launch_id for seg in segments)
    for seg in segments:
        root = sessions / seg.launch_id
        assert session_state(root) is not SessionState.RUNNING
        # The worker logs one line as it ends; a second launch would have run it again.
        ends = re.findall(rf"segment {seg.index} of {job_id}: ", (root / LOG_FILE).read_text())
        assert len(ends) == 1, (seg.launch_id, ends)


def _assert_each_kaggle_segment_pushed_once(
    rig: ScaleRig, job_id: str, segments: list[Segment]
) -> None:
    sessions = rig.emulator.sessions(f"alice/{kernel_slug(job_id)}")
    pushes = Counter(launch_id_of(session.script) for session in sessions)
    assert pushes == dict.fromkeys((seg.launch_id for seg in segments), 1)
