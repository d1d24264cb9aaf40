"""Many reconcilers, one database: every segment is launched exactly once, and only its own
launcher ever touches a session."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.migrate import upgrade
from orchestrator.models import Checkpoint, Job, Segment
from tests.support.engine_runs import fake_engine, reconcile_until_finished, submit_jobs
from tests.support.fake_backend import FakeBackend, uninterrupted_digest

JOBS = 20
TOTAL_STEPS = 30  # three segments of 10 steps each
# A launch shows up in `find` only after this long: the window in which a second reconciler
# without the claim would push the same segment again.
VISIBLE_AFTER = 0.3


def test_threads_and_processes_launch_every_segment_exactly_once(
    database_url: str, tmp_path: Path
) -> None:
    upgrade(database_url)
    db = Database(database_url)
    fake_root, checkpoints = tmp_path / "fake", tmp_path / "checkpoints"
    backend = FakeBackend(fake_root, session_seconds=0.1, visible_after=VISIBLE_AFTER)
    job_ids = submit_jobs(fake_engine(db, backend, checkpoints), JOBS, total_steps=TOTAL_STEPS)

    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.engine_runs",
                database_url,
                str(fake_root),
                str(checkpoints),
                "120",
                str(VISIBLE_AFTER),
            ]
        )
        for _ in range(2)
    ]
    threads = [
        threading.Thread(
            target=reconcile_until_finished,
            args=(
                fake_engine(
                    db,
                    FakeBackend(fake_root, session_seconds=0.1, visible_after=VISIBLE_AFTER),
                    checkpoints,
                ),
                120,
            ),
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for process in processes:
        assert process.wait(timeout=150) == 0

    launches = backend.launches()
    assert len(launches) == len(set(launches)), "a segment was launched twice"
    assert backend.cancels() == [], "a reconciler cancelled a session"
    with db.transaction() as session:
        states = {job.id: job.state for job in session.scalars(select(Job))}
        segments = session.scalars(select(Segment)).all()
        final = {
            row.job_id: row.model_digest
            for row in session.scalars(select(Checkpoint).where(Checkpoint.step == TOTAL_STEPS))
        }
    assert states == dict.fromkeys(job_ids, "succeeded")
    assert sorted(launches) == sorted(segment.launch_id for segment in segments)
    assert len(segments) == JOBS * 3
    assert final == dict.fromkeys(job_ids, uninterrupted_digest(TOTAL_STEPS))
    db.dispose()
