"""Many reconcilers, one database: every segment is launched exactly once, and only its own
launcher ever touches a session. The claim that makes it so, one lease per job, on SQLite with a
hand-moved clock: one owner at a time until the lease expires, and a holder that lost its lease is
told so and never frees the new holder's claim."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.engine.claim import Claims
from orchestrator.migrate import upgrade
from orchestrator.models import Checkpoint, Job, Segment
from tests.support.clock import ManualClock
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


def _two_jobs(db: Database, tmp_path: Path) -> list[str]:
    return submit_jobs(fake_engine(db, FakeBackend(tmp_path / "fake"), tmp_path / "ckpt"), 2)


def test_one_owner_holds_a_job_until_its_lease_expires_and_a_renewal_extends_it(
    sqlite_db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    first, second = _two_jobs(sqlite_db, tmp_path)
    a, b, c = (Claims(sqlite_db, clock, owner=name, lease_seconds=60) for name in "abc")

    assert a.take(first)
    assert not b.take(first), "a second owner took a job whose lease runs"
    assert a.take(first), "the holder itself is refused its own job"
    assert a.take(second)

    clock.advance(59)
    assert not b.take(first)
    assert a.renew(first)  # from now: the lease runs to 59 + 60 s; `second`'s does not
    clock.advance(2)
    assert b.take(second), "renewing one job extended another job's lease"
    clock.advance(57)
    assert not b.take(first), "the renewal did not extend the lease"
    clock.advance(2)
    assert b.take(first), "an expired lease still kept the job from others"

    # The old holder lost it: it cannot renew, and its release leaves the new holder's claim.
    assert not a.renew(first)
    a.release(first)
    assert not c.take(first)
    b.release(first)
    assert c.take(first)
    assert not c.take(second), "releasing one job freed another"


def test_a_holder_that_loses_its_lease_is_told_and_never_frees_the_new_holders_claim(
    sqlite_db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    first, _ = _two_jobs(sqlite_db, tmp_path)
    # A lease of 0.03 s renews every 10 ms of real time; the hand-moved clock decides expiry.
    a = Claims(sqlite_db, clock, owner="a", lease_seconds=0.03)
    b, c = (Claims(sqlite_db, clock, owner=name, lease_seconds=60) for name in "bc")

    with a.hold(first) as claim:
        assert claim is not None
        assert claim.held()
        with b.hold(first) as other:
            assert other is None, "two holders at once"
        # While it works, its lease is renewed from the clock's new time, and it still holds.
        clock.advance(0.01)
        _wait_until(lambda: _lease_end(sqlite_db, first) == clock.now + timedelta(seconds=0.03))
        assert claim.held(), "a renewal that went through was taken for a lost lease"
    # A hold that ends frees the job at once, for anyone.
    with b.hold(first) as other:
        assert other is not None
    assert c.take(first)
    c.release(first)

    with a.hold(first) as claim:
        assert claim is not None
        clock.advance(1)  # a's lease has expired; b takes the job over
        assert b.take(first)
        _wait_until(lambda: not claim.held())
    assert not c.take(first), "the old holder's end freed the new holder's claim"


def _lease_end(db: Database, job_id: str) -> datetime | None:
    with db.transaction() as session:
        end = session.scalar(select(Job.claim_expires_at).where(Job.id == job_id))
    return None if end is None else end.replace(tzinfo=UTC)


def _wait_until(done: Callable[[], bool]) -> None:
    hang_guard = time.monotonic() + 60
    while not done():
        assert time.monotonic() < hang_guard, "waited 60 s for the claim's renewer"
        time.sleep(0.01)
