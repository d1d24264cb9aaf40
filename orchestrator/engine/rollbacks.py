"""How often a job resumed from its last good checkpoint after diverging.

Counted from the job's `rolled_back` events: the event is the record the user sees, so no
column keeps a second copy that could disagree with it.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.models import Event

ROLLED_BACK_EVENT = "rolled_back"


def count_rollbacks(session: Session, job_id: str) -> int:
    query = select(func.count(Event.id)).where(
        Event.job_id == job_id, Event.kind == ROLLED_BACK_EVENT
    )
    return int(session.scalar(query) or 0)
