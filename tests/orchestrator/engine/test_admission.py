"""Capacity is admission: with 2 local slots, 10 jobs run at most 2 sessions at any moment, first
come first served, and every one of them still ends on the uninterrupted digest; a waiting job
says why; two reconcilers on one PostgreSQL never admit more sessions than a slot holds."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text

from orchestrator import queries
from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.db import Database
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES
from orchestrator.models import Job, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec, make_settings, reference_digest, running_api, wait_finished
from tests.support.clock import ManualClock
from tests.support.databases import cloned_postgres, enter_postgres
from tests.support.engine_runs import fake_engine, submit_jobs
from tests.support.fake_backend import FakeBackend
from worker.boundary.launch_id import LaunchId
from worker.boundary.paths import STATUS_FILE

JOBS = 10
SLOTS = 2
SPEC = job_spec(total_steps=20)


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, change in edges:
        running += change
        most = max(most, running)
    return most


@pytest.mark.slow
def test_ten_jobs_share_two_local_slots(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", local_slots=SLOTS)
    with running_api(settings) as api:
        job_ids = [api.post("/api/v1/jobs", json=SPEC).json()["id"] for _ in range(JOBS)]
        finished = [wait_finished(api, job_id, timeout=600) for job_id in job_ids]
        last = job_ids[-1]
        waited = [
            e
            for e in api.get(f"/api/v1/jobs/{last}/events").json()
            if e["kind"] == "queued_for_slot"
        ]
        segments = {job_id: api.get(f"/api/v1/jobs/{job_id}/segments").json() for job_id in job_ids}
    digests = {segments[job_id][-1]["checkpoint"]["model_digest"] for job_id in job_ids}
    assert [job["state"] for job in finished] == ["succeeded"] * JOBS
    assert digests == {reference_digest(SPEC, tmp_path / "reference")}
    assert len(waited) == 1
    assert "slot" in waited[0]["message"]
    sessions = {
        path.parent.name.rsplit("-", 1)[0]: json.loads(path.read_text())
        for path in settings.sessions_dir.glob(f"*/{STATUS_FILE}")
    }
    assert sorted(sessions) == sorted(job_ids)
    assert _most_at_once([(s["started_at"], s["ended_at"]) for s in sessions.values()]) <= SLOTS
    # First come, first served: the slots went to the jobs in the order they were submitted (each
    # job's first segment is planned when it gets its slot). Not the sessions' own start times:
    # two launched in one tick start in whatever order their processes come up. When both slots
    # free at once, one pass admits the first two waiting, and plans them in the order it visits
    # them: a job may overtake the one submitted just before it, never one further ahead.
    first_planned = {job_id: segments[job_id][0]["created_at"] for job_id in job_ids}
    planned = sorted(job_ids, key=first_planned.__getitem__)
    assert all(abs(planned.index(job_id) - i) < SLOTS for i, job_id in enumerate(job_ids)), planned


def _queue_reasons(db: Database, owners: dict[str, str]) -> dict[str, str | None]:
    """Why each job (of its owner) waits, as the job page shows it (None: it does not wait)."""
    with db.transaction() as session:
        return {
            job_id: queries.get_job(session, owner, job_id).queue_reason
            for job_id, owner in owners.items()
        }


def test_a_job_waiting_for_a_slot_says_why_once_and_a_job_that_runs_says_nothing(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """Kaggle session cap, as the user reads it: a job that waits for a place in its slot says
    how many sessions hold it, or how many jobs go before it; it says so in one event however
    often it is looked at, and a job that runs shows no reason."""
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds, slot_limit=2
    )
    engine = fake_engine(sqlite_db, backend, tmp_path / "checkpoints", clock=clock)
    a1, a2, a3 = submit_jobs(engine, 3, total_steps=20)
    with sqlite_db.transaction() as session:
        alice = get_or_create_user(session, ADMIN_USER).id
        bob = get_or_create_user(session, "bob").id
    b1 = engine.submit(bob, JobSpec.model_validate(job_spec(total_steps=20))).id
    jobs = {a1: alice, a2: alice, a3: alice, b1: bob}

    engine.reconcile_all()
    busy = "waiting for a free session slot (2 of 2 busy)"
    assert _queue_reasons(sqlite_db, jobs) == {a1: None, a2: None, a3: busy, b1: busy}
    # a1's first session ends; its next segment waits behind bob's job, whose user has the
    # smaller share of the slot.
    clock.advance(5)
    engine.reconcile_job(a1)
    ahead = "waiting for a free session slot (1 queued ahead)"
    assert _queue_reasons(sqlite_db, jobs) == {a1: ahead, a2: None, a3: busy, b1: busy}
    for job_id in [a3, b1, a1, a3, b1, a1]:
        engine.reconcile_job(job_id)
    with sqlite_db.transaction() as session:
        waited = {
            job_id: [
                (e.kind, e.message)
                for e in queries.list_events(session, jobs[job_id], job_id)
                if e.kind == "queued_for_slot"
            ]
            for job_id in jobs
        }
    assert waited == {
        a1: [("queued_for_slot", ahead)],
        a2: [],
        a3: [("queued_for_slot", busy)],
        b1: [("queued_for_slot", busy)],
    }


@pytest.fixture
def postgres_db() -> Iterator[Database]:
    """A migrated PostgreSQL database of the test's own (a clone); skipped where PostgreSQL is
    not reachable, failing instead in CI (BATON_REQUIRE_SERVICES=1)."""
    with ExitStack() as stack:
        db = Database(enter_postgres(stack, cloned_postgres))
        stack.callback(db.dispose)
        yield db


# A bound on waiting for the other thread, so that a broken run fails instead of hanging; no
# assertion depends on how long anything takes.
HANG_GUARD_SECONDS = 60


class HoldBeforeItsSegment:
    """Holds one thread's admission transaction just before it writes the segment it admitted:
    the moment another reconciler's admission must not slip into."""

    def __init__(self, db: Database) -> None:
        self.thread: threading.Thread | None = None
        self.holding = threading.Event()
        self.released = threading.Event()
        event.listen(db.engine, "before_cursor_execute", self._before)

    def _before(self, *args: Any) -> None:
        statement = args[2]
        if threading.current_thread() is self.thread and statement.startswith(
            "INSERT INTO segments"
        ):
            self.holding.set()
            assert self.released.wait(HANG_GUARD_SECONDS)


def _waits_for_a_lock(db: Database) -> bool:
    with db.reading() as session:
        waiting = session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    return bool(waiting)


@pytest.mark.integration
def test_two_reconcilers_on_postgresql_never_admit_more_sessions_than_the_slot_holds(
    postgres_db: Database, tmp_path: Path
) -> None:
    """Kaggle session cap across orchestrator workers: two reconcilers admit one job each into a
    slot of one, the second while the first has admitted its job but not yet committed. The
    second waits for the first, then sees the slot taken: one session runs, and the other job
    waits saying why."""
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", session_seconds=60, poll_seconds=1, clock=clock.seconds, slot_limit=1
    )
    first, second = (
        fake_engine(postgres_db, backend, tmp_path / "checkpoints", clock=clock) for _ in range(2)
    )
    job_a, job_b = submit_jobs(first, 2)
    hold = HoldBeforeItsSegment(postgres_db)
    hold.thread = threading.Thread(target=first.reconcile_job, args=(job_a,))
    other = threading.Thread(target=second.reconcile_job, args=(job_b,))
    hold.thread.start()
    guard = time.monotonic() + HANG_GUARD_SECONDS
    while hold.thread.is_alive() and not hold.holding.wait(0.01):
        assert time.monotonic() < guard, "the first reconciler never reached its segment"
    assert hold.holding.is_set(), "the first reconciler ended without admitting its job"
    other.start()
    while other.is_alive() and not _waits_for_a_lock(postgres_db):
        assert time.monotonic() < guard, "the second reconciler neither ended nor waited"
        time.sleep(0.01)
    hold.released.set()
    hold.thread.join(HANG_GUARD_SECONDS)
    other.join(HANG_GUARD_SECONDS)

    with postgres_db.transaction() as session:
        states = {
            job_id: (job.state, job.queue_reason)
            for job_id in (job_a, job_b)
            if (job := session.get(Job, job_id)) is not None
        }
        active = session.scalars(
            select(Segment.job_id).where(
                Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES])
            )
        ).all()
    assert active == [job_a]
    assert states == {
        job_a: ("running", None),
        job_b: ("queued", "waiting for a free session slot (1 of 1 busy)"),
    }
    assert [LaunchId.parse(launch).job_id for launch in backend.launches()] == [job_a]
