"""kill -9 the orchestrator at each moment of a launch and restart it at once: every segment
still runs exactly once, and the job ends on the uninterrupted digest."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.migrate import upgrade
from orchestrator.models import Checkpoint, Job, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec, reference_digest, stop_sessions
from tests.support.crashing_orchestrator import MOMENTS
from tests.support.fake_backend import FakeBackend

pytestmark = pytest.mark.slow

SPEC = job_spec(total_steps=40)


def _orchestrator(url: str, data: Path, job_id: str, die_at: str) -> int:
    command = [sys.executable, "-m", "tests.support.crashing_orchestrator", url, str(data)]
    return subprocess.run([*command, job_id, die_at], timeout=400, check=False).returncode


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_crash_at_any_moment_of_a_launch_runs_the_segment_once(
    moment: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    url = f"sqlite:///{tmp_path / 'baton.db'}"
    upgrade(url)
    db = Database(url)
    with db.transaction() as session:
        user_id = get_or_create_user(session, ADMIN_USER).id
    unused = FakeBackend(tmp_path / "unused")
    engine = Engine(db, StaticBackends({"local": unused}), data / "checkpoints")
    job_id = engine.submit(user_id, JobSpec.model_validate(SPEC)).id
    try:
        assert _orchestrator(url, data, job_id, moment) == -signal.SIGKILL
        assert _orchestrator(url, data, job_id, "never") == 0
        with db.transaction() as session:
            job = session.get(Job, job_id)
            segments = session.scalars(select(Segment).where(Segment.job_id == job_id)).all()
            final = session.scalars(select(Checkpoint).where(Checkpoint.step == 40)).one()
    finally:
        stop_sessions(data / "sessions")
        db.dispose()
    assert job is not None
    assert job.state == "succeeded", job.reason
    spawns = Counter((data / "spawns.log").read_text().split())
    assert spawns == Counter(segment.launch_id for segment in segments), "a segment ran twice"
    assert [segment.state for segment in segments] == ["succeeded"]
    assert final.model_digest == reference_digest(SPEC, tmp_path / "reference")
