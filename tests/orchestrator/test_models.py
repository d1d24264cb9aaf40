"""Every time column is aware UTC on the way out, whatever zone it was written in, on SQLite
(which keeps no zone) and PostgreSQL alike; a naive time is refused on the way in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.exc import StatementError

from orchestrator.db import Database
from orchestrator.models import Job, User
from tests.factories import job_spec

BERLIN_SUMMER = timezone(timedelta(hours=2))


def _job(**times: datetime) -> Job:
    return Job(
        id="j1",
        user_id="u1",
        name="t",
        backend="local",
        state="waiting",
        spec=job_spec(),
        total_steps=50,
        **times,
    )


def test_a_time_written_in_any_zone_reads_back_as_the_same_instant_in_utc(
    migrated_db: Database,
) -> None:
    written = datetime(2026, 11, 23, 14, 30, tzinfo=BERLIN_SUMMER)
    with migrated_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
    with migrated_db.transaction() as session:
        session.add(_job(wait_until=written))
    with migrated_db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        read = job.wait_until
        created = job.created_at  # stamped by the default, orchestrator.clock
    assert read == written
    assert read is not None
    assert (read.tzinfo, read.hour) == (UTC, 12)
    assert created.tzinfo is UTC


def test_a_naive_time_is_refused(migrated_db: Database) -> None:
    with migrated_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
    with pytest.raises(StatementError, match="naive datetime"), migrated_db.transaction() as s:
        s.add(_job(wait_until=datetime(2026, 11, 23, 14, 30)))
