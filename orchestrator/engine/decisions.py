"""A lifecycle decision on a job row: the view the pure rules read, and the write that applies
what they decided (through transitions.py, the only state writer)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from orchestrator.engine.text import clip
from orchestrator.lifecycle import NO_CHANGES, Decision, JobChanges, JobState, JobView
from orchestrator.models import Job
from orchestrator.spec import stored_spec
from orchestrator.transitions import set_job_state


def job_view(job: Job, rollbacks: int = 0) -> JobView:
    spec = stored_spec(job.spec)
    return JobView(
        state=JobState(job.state),
        steps_done=job.steps_done,
        total_steps=job.total_steps,
        failures=job.failures,
        max_failures=spec.retry.max_failures,
        pause_requested=job.pause_requested,
        rollback_on_divergence=spec.session.watchdog.on_divergence == "rollback",
        rollbacks=rollbacks,
    )


def apply_decision(
    session: Session,
    job: Job,
    decision: Decision,
    extra: JobChanges = NO_CHANGES,
    *,
    now: datetime,
) -> None:
    set_job_state(
        session,
        job.id,
        JobState(job.state),
        decision.to_state,
        event=decision.event,
        message=clip(decision.message),
        changes=decision.changes | extra,
        now=now,
    )
