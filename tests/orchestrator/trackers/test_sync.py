"""Bringing a job's trackers up to date (orchestrator/trackers/sync.py), over a real database and
TensorBoard's own files: only committed steps, each once; a failed sync leaves an event and is
caught up by the next; a segment that trained steps again after a rejected checkpoint adds only
what is new."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import SegmentState
from orchestrator.migrate import upgrade
from orchestrator.models import Event, Segment
from orchestrator.queries import committed_metrics
from orchestrator.spec import JobSpec
from orchestrator.trackers.sync import TRACKER_FAILED_EVENT, TrackerSync, by_step
from orchestrator.wire import MetricPoint
from tests.factories import job_spec

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    upgrade(database_url)
    database = Database(database_url)
    yield database
    database.dispose()


def submit(db: Database, tmp_path: Path) -> str:
    engine = Engine(db, StaticBackends({}), tmp_path / "checkpoints", clock=lambda: NOW)
    with db.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
    spec = JobSpec.model_validate(job_spec(trackers={"tensorboard": True}))
    return engine.submit(owner, spec).id


def add_segment(db: Database, job_id: str, index: int, steps: range, *, committed: bool) -> None:
    """A segment that logged `steps` (every step) after resuming at `steps.start - 1`."""
    state = SegmentState.SUCCEEDED if committed else SegmentState.FAILED
    with db.transaction() as session:
        session.add(
            Segment(
                job_id=job_id,
                index=index,
                state=state.value,
                launch_id=f"{job_id}-{index:04d}",
                start_step=steps.start - 1,
                end_step=steps.stop - 1 if committed else None,
                limit_seconds=60,
                launch_spec={},
                metrics=[{"step": step, "loss": 1.0 / step + index} for step in steps],
            )
        )


def board_steps(logdir: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), purge_orphaned_data=False)
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars("loss")]


def failures(db: Database, job_id: str) -> list[str | None]:
    with db.transaction() as session:
        query = select(Event.message).where(
            Event.job_id == job_id, Event.kind == TRACKER_FAILED_EVENT
        )
        return list(session.scalars(query))


def test_only_committed_steps_reach_the_tracker_each_once(db: Database, tmp_path: Path) -> None:
    job_id = submit(db, tmp_path)
    trackers = TrackerSync(db, tmp_path / "trackers", lambda: NOW)
    logdir = tmp_path / "trackers" / "tensorboard" / f"test-job-{job_id}"
    add_segment(db, job_id, 0, range(1, 5), committed=True)
    add_segment(db, job_id, 1, range(5, 7), committed=False)  # trained past step 4, then failed
    add_segment(db, job_id, 2, range(5, 9), committed=True)

    # The run's directory cannot be made: the sync fails, says so, and the job is not touched.
    logdir.parent.mkdir(parents=True)
    logdir.write_text("in the way")
    trackers.sync(job_id, finished=False)
    [message] = failures(db, job_id)
    assert message is not None
    assert message.startswith("tensorboard: FileExistsError")
    assert message.endswith("tried again at the next commit")

    logdir.unlink()
    trackers.sync(job_id, finished=False)  # catches up
    trackers.sync(job_id, finished=False)  # nothing new: nothing written
    assert board_steps(logdir) == list(range(1, 9))
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1

    # Checkpoint 8 was rejected: segment 3 resumed from step 4 and trained 5 to 12. The series
    # keeps its copy of 5 to 8; the tracker, which has them already, gets 9 to 12.
    add_segment(db, job_id, 3, range(5, 13), committed=True)
    with db.transaction() as session:
        served = committed_metrics(session, job_id)
    assert [(p.segment_index, p.step) for p in served] == [(0, s) for s in range(1, 5)] + [
        (3, s) for s in range(5, 13)
    ]
    trackers.sync(job_id, finished=True)
    assert board_steps(logdir) == list(range(1, 13))
    # Two writes, each of only what was new (a file is named by its first step).
    assert sorted(path.name for path in logdir.glob("events.out.tfevents.*")) == [
        "events.out.tfevents.000000000001.baton",
        "events.out.tfevents.000000000009.baton",
    ]
    assert len(failures(db, job_id)) == 1


def test_what_a_loop_logs_apart_for_one_step_is_one_entry() -> None:
    points = [
        MetricPoint(segment_index=0, step=10, values={"loss": 1.0}),
        MetricPoint(segment_index=0, step=10, values={"eval_loss": 2.0}),
        MetricPoint(segment_index=0, step=20, values={"loss": 0.5}),
    ]
    assert [(s.step, s.values) for s in by_step(points)] == [
        (10, {"loss": 1.0, "eval_loss": 2.0}),
        (20, {"loss": 0.5}),
    ]
