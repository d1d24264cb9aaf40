"""Which segment of a job is running now."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES
from orchestrator.models import Segment


def active_segment(session: Session, job_id: str) -> Segment | None:
    return session.scalars(
        select(Segment).where(
            Segment.job_id == job_id,
            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
        )
    ).first()
