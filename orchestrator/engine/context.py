"""What every phase of the engine works with, and what each tells the engine to do next."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db import Database
from orchestrator.engine.checkpoints import CheckpointStore
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, Decision, JobState, JobView
from orchestrator.models import Job, Segment
from orchestrator.spec import JobSpec
from orchestrator.transitions import set_job_state
from worker.boundary.text import TEXT_LIMIT
from worker.reasons import storable


@dataclass(frozen=True)
class Context:
    db: Database
    clock: Callable[[], datetime]
    store: CheckpointStore


@dataclass(frozen=True)
class Next:
    """When the job needs a look again: `delay` seconds (None: at once); `again`: within this
    same visit, because something ended and the next step can start now."""

    delay: float | None
    again: bool = False


def job_view(job: Job) -> JobView:
    return JobView(
        state=JobState(job.state),
        steps_done=job.steps_done,
        total_steps=job.total_steps,
        failures=job.failures,
        max_failures=int(job.spec["retry"]["max_failures"]),
        pause_requested=job.pause_requested,
    )


def apply_decision(session: Session, job: Job, decision: Decision, **extra: Any) -> None:
    set_job_state(
        session,
        job.id,
        JobState(job.state),
        decision.to_state,
        event=decision.event,
        message=clip(decision.message),
        **decision.fields,
        **extra,
    )


def active_segment(session: Session, job_id: str) -> Segment | None:
    return session.scalars(
        select(Segment).where(
            Segment.job_id == job_id,
            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
        )
    ).first()


def stored_spec(data: dict[str, Any]) -> JobSpec:
    """The spec as submitted. It was validated then; the trainer is not looked up again."""
    return JobSpec.model_validate(data, context={"stored": True})


def clip(text: str | None, limit: int = TEXT_LIMIT) -> str | None:
    if text is None:
        return None
    text = storable(text)
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
