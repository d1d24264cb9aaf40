"""Due jobs with nothing to do, put off in one statement per batch instead of one visit each.

A waiting job whose quota refresh is still ahead, with no live segment, needs no action: its
visit (claim, read, decide, schedule, release: five round trips) would only set its next look
to the refresh. `park_waiting` does that for a whole batch in one UPDATE, under the same
conditions a claim needs: a job someone holds is left to its holder. The UPDATE's row lock is
the claim for the statement's duration, and PostgreSQL re-checks the conditions on a row that
another writer changed meanwhile, so a job that a user resumes or an engine claims at the same
time is either parked before or left alone after, never both.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import exists, or_, select, update

from orchestrator.db import Database
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, JobState
from orchestrator.models import Job, KaggleCredential, Segment

_ACTIVE = [state.value for state in ACTIVE_SEGMENT_STATES]


def park_waiting(db: Database, job_ids: list[str], now: datetime) -> list[str]:
    """Of `job_ids`, the waiting jobs that need no action now, each due next at its quota
    refresh (as a visit would leave it: `decide_quota` is None before the refresh)."""
    if not job_ids:
        return []
    live_segment = exists(
        select(Segment.id).where(Segment.job_id == Job.id, Segment.state.in_(_ACTIVE))
    )
    # A Kaggle job without credentials is failed by a visit (its backend cannot be built).
    reachable = or_(
        Job.backend != "kaggle",
        exists(select(KaggleCredential.user_id).where(KaggleCredential.user_id == Job.user_id)),
    )
    statement = (
        update(Job)
        .where(
            Job.id.in_(job_ids),
            Job.state == JobState.WAITING.value,
            Job.wait_until > now,
            or_(Job.claim_owner.is_(None), Job.claim_expires_at < now),
            ~live_segment,
            reachable,
        )
        .values(next_attempt_at=Job.wait_until, transient_errors=0)
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    )
    with db.transaction() as session:
        return list(session.scalars(statement))
