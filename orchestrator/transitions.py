"""The one way state changes reach the database: compare-and-set writes plus an event row.

`UPDATE … WHERE id=:id AND state=:expected`; a rowcount other than 1 means someone else moved the
row first, and the caller re-reads instead of overwriting.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.lifecycle import (
    NO_CHANGES,
    JobChanges,
    JobState,
    SegmentState,
    job_transition_allowed,
    segment_transition_allowed,
)
from orchestrator.models import Event, Job, Segment, utcnow
from worker.boundary.text import EVENT_MESSAGE_LIMIT
from worker.reasons import storable


def _storable_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Text fields (a reason, an error) as both databases accept them."""
    return {key: storable(v) if isinstance(v, str) else v for key, v in fields.items()}


class IllegalTransition(Exception):
    """The transition tables forbid this change."""


class StaleState(Exception):
    """The row was not in the expected state: another writer moved it first."""


def record_event(
    session: Session,
    job_id: str,
    kind: str,
    *,
    segment_index: int | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
    message: str | None = None,
    at: datetime | None = None,
) -> None:
    """One event row, stamped `at` (the engine's clock) or, without one, the wall clock."""
    session.add(
        Event(
            job_id=job_id,
            created_at=at or utcnow(),
            segment_index=segment_index,
            kind=kind,
            from_state=from_state,
            to_state=to_state,
            message=storable(message[:EVENT_MESSAGE_LIMIT]) if message else None,
        )
    )


def set_job_state(
    session: Session,
    job_id: str,
    expected: JobState,
    target: JobState | None,
    *,
    event: str,
    message: str | None = None,
    changes: JobChanges = NO_CHANGES,
    now: datetime,
) -> None:
    """Move a job from `expected` to `target` (None: keep the state, write `changes` only), at
    `now` by the engine's clock."""
    if target is not None and not job_transition_allowed(expected, target):
        raise IllegalTransition(f"job {job_id}: {expected} -> {target} is not allowed")
    values: dict[str, Any] = {**_storable_fields(changes.values()), "updated_at": now}
    if target is not None:
        values["state"] = target.value
        if target is JobState.RUNNING:
            values.setdefault("started_at", now)
        if target in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            values["finished_at"] = now
        elif expected is JobState.FAILED:
            values["finished_at"] = None
    statement = (
        update(Job)
        .where(Job.id == job_id, Job.state == expected.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if session.execute(statement).rowcount != 1:  # type: ignore[attr-defined]
        raise StaleState(f"job {job_id} is no longer {expected}")
    record_event(
        session,
        job_id,
        event,
        from_state=expected.value,
        to_state=(target or expected).value,
        message=message,
        at=now,
    )


def set_segment_state(
    session: Session,
    segment: Segment,
    target: SegmentState,
    *,
    message: str | None = None,
    now: datetime,
    **fields: Any,
) -> None:
    """Move a segment to `target`, writing `fields` with it, at `now` by the engine's clock."""
    expected = SegmentState(segment.state)
    if not segment_transition_allowed(expected, target):
        raise IllegalTransition(f"segment {segment.launch_id}: {expected} -> {target}")
    statement = (
        update(Segment)
        .where(Segment.id == segment.id, Segment.state == expected.value)
        .values(state=target.value, **_storable_fields(fields))
        .execution_options(synchronize_session=False)
    )
    if session.execute(statement).rowcount != 1:  # type: ignore[attr-defined]
        raise StaleState(f"segment {segment.launch_id} is no longer {expected}")
    record_event(
        session,
        segment.job_id,
        f"segment_{target.value}",
        segment_index=segment.index,
        from_state=expected.value,
        to_state=target.value,
        message=message,
        at=now,
    )
