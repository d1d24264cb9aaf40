"""Fair admission: a slot goes to the user with the smallest share of it (running plus admitted
ahead), so a second user's first job is not stuck behind everything a first user queued."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import get_or_create_user, issue_token
from orchestrator.db import Database
from orchestrator.engine.admission import fair_order
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, SegmentState
from orchestrator.models import Job, Segment
from orchestrator.service import prestart
from orchestrator.spec import JobSpec
from tests.factories import auth, job_spec, make_settings, running_api
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, job_and_segments, submit_jobs
from tests.support.fake_backend import FakeBackend
from worker.boundary.launch_id import LaunchId


def test_a_user_with_jobs_running_waits_behind_one_with_none() -> None:
    queued = [("a3", "alice"), ("a4", "alice"), ("b1", "bob"), ("b2", "bob"), ("c1", "carol")]
    # alice holds both slots: bob's and carol's first jobs go before her third.
    assert fair_order(queued, {"alice": 2}) == ["b1", "c1", "b2", "a3", "a4"]
    # Nobody running: round-robin, oldest first within a round.
    assert fair_order(queued) == ["a3", "b1", "c1", "a4", "b2"]


# Its engine ticks start 30 jobs' local sessions.
@pytest.mark.slow
def test_two_users_two_slots_the_second_users_first_job_takes_the_next_free_slot(
    tmp_path: Path, database_url: str
) -> None:
    settings = make_settings(tmp_path / "data", database_url=database_url, local_slots=2)
    prestart(settings)
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        bob = auth(issue_token(session, "bob"))
    db.dispose()
    # Each job runs a few seconds, so slots turn over while the test watches. The test ticks the
    # engine itself, so bob's jobs are queued before any of alice's can end, however slow the
    # machine.
    spec = job_spec(total_steps=40, config={"step_sleep": 0.05})
    with running_api(settings, embedded_loop=False) as api:
        engine = api.app.state.services.engine  # type: ignore[attr-defined]
        # Alice's second job trains 20 s longer than her first, so one slot frees at a time.
        long = job_spec(total_steps=440, config={"step_sleep": 0.05})
        alice_specs = [spec, long, *[spec] * 18]
        alice_jobs = [api.post("/api/v1/jobs", json=one).json()["id"] for one in alice_specs]
        engine.reconcile_all()
        bob_jobs = [
            api.post("/api/v1/jobs", json=spec, headers=bob).json()["id"] for _ in range(10)
        ]
        deadline = time.monotonic() + 240
        while api.get(f"/api/v1/jobs/{bob_jobs[0]}", headers=bob).json()["state"] == "queued":
            assert time.monotonic() < deadline, "bob's first job was never admitted"
            engine.reconcile_all()
            time.sleep(0.1)
        alice = dict(api.headers)
        owners = {
            **{job_id: alice for job_id in alice_jobs},
            **{job_id: bob for job_id in bob_jobs},
        }
        first_planned = {}
        for job_id, headers in owners.items():
            segments = api.get(f"/api/v1/jobs/{job_id}/segments", headers=headers).json()
            if segments:
                first_planned[job_id] = segments[0]["created_at"]
        for job_id, headers in owners.items():
            api.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers)
        engine.reconcile_all()
    order = sorted(first_planned, key=first_planned.__getitem__)
    # Alice's first two took the slots; the next slot to free went to bob's first job, before
    # any of alice's 18 others that were queued before it.
    assert order[:2] == alice_jobs[:2]
    assert order[2] == bob_jobs[0], order


def test_a_slot_runs_its_limit_at_once_never_more_and_the_next_place_goes_to_the_smaller_share(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """On the fake backend and a hand-moved clock: a slot of 2 (a Kaggle account's two GPU
    sessions) runs two segments at once and never a third; a waiting job says why; each place
    that frees goes to the user with the smaller share, and every job finishes."""
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds, slot_limit=2
    )
    engine = fake_engine(sqlite_db, backend, tmp_path / "checkpoints", clock=clock)
    alice = submit_jobs(engine, 4, total_steps=10)
    with sqlite_db.transaction() as session:
        bob_id = get_or_create_user(session, "bob").id
    bob = engine.submit(bob_id, JobSpec.model_validate(job_spec(total_steps=10))).id

    busiest, reasons = 0, set()
    for _ in range(40):
        engine.reconcile_all()
        clock.advance(1)
        with sqlite_db.transaction() as session:
            states = session.scalars(select(Segment.state)).all()
            reasons |= set(session.scalars(select(Job.queue_reason)).all())
        busiest = max(busiest, sum(SegmentState(s) in ACTIVE_SEGMENT_STATES for s in states))
    assert busiest == 2
    assert any("waiting for a free session slot" in (reason or "") for reason in reasons)
    order = [LaunchId.parse(launch).job_id for launch in backend.launches()]
    # Alice's first two take both places. When both free, her third and bob's job take them:
    # bob's, submitted after her fourth, goes first with no share of the slot.
    assert order == [alice[0], alice[1], alice[2], bob, alice[3]]
    for job_id in [*alice, bob]:
        job, _ = job_and_segments(sqlite_db, job_id)
        assert job.state == "succeeded"
