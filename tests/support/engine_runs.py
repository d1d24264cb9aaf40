"""Drive engines over a fake backend from threads or processes, as several orchestrators would.

`python -m tests.support.engine_runs DB_URL FAKE_ROOT CHECKPOINTS SECONDS VISIBLE_AFTER` runs one
orchestrator process that reconciles until every job has finished or SECONDS have passed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sqlalchemy import select

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import FINISHED_JOB_STATES
from orchestrator.models import Checkpoint, Job, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec
from tests.support.clock import ManualClock
from tests.support.fake_backend import FakeBackend


def fake_engine(db: Database, backend: FakeBackend, checkpoints: Path, **kwargs: object) -> Engine:
    return Engine(db, StaticBackends({"local": backend}), checkpoints, **kwargs)  # type: ignore[arg-type]


def submit_jobs(engine: Engine, count: int, **overrides: object) -> list[str]:
    with engine.db.transaction() as session:
        user_id = get_or_create_user(session, ADMIN_USER).id
    spec = JobSpec.model_validate(job_spec(**overrides))
    return [engine.submit(user_id, spec).id for _ in range(count)]


def all_finished(db: Database) -> bool:
    with db.transaction() as session:
        states = session.scalars(select(Job.state)).all()
    return bool(states) and all(state in FINISHED_JOB_STATES for state in states)


def reconcile_until_finished(engine: Engine, seconds: float, poll: float = 0.01) -> None:
    """Reconcile every due job each `poll` seconds until all have finished (a tight loop by
    default: the claim tests race four of these)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all_finished(engine.db):
        engine.reconcile_all()
        time.sleep(poll)


def tick(engine: Engine, clock: ManualClock, ticks: int) -> None:
    """Reconcile every due job, then move the clock a second on; `ticks` times."""
    for _ in range(ticks):
        engine.reconcile_all()
        clock.advance(1)


def job_and_segments(db: Database, job_id: str) -> tuple[Job, list[Segment]]:
    with db.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        segments = list(
            session.scalars(select(Segment).where(Segment.job_id == job_id).order_by(Segment.index))
        )
    return job, segments


def final_digest(db: Database, job_id: str) -> str | None:
    """The model digest of the job's newest stored checkpoint (None: it has none)."""
    with db.transaction() as session:
        return session.scalars(
            select(Checkpoint.model_digest)
            .where(Checkpoint.job_id == job_id)
            .order_by(Checkpoint.step.desc())
        ).first()


def main(argv: list[str]) -> int:
    url, fake_root, checkpoints, seconds, visible_after = argv[1:6]
    db = Database(url)
    backend = FakeBackend(Path(fake_root), session_seconds=0.1, visible_after=float(visible_after))
    engine = fake_engine(db, backend, Path(checkpoints))
    reconcile_until_finished(engine, float(seconds))
    db.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
