"""Moving a job to another backend: its spec rewritten for the new one, and an event saying so.

Checkpoints have one format everywhere, so the job continues from its newest verified
checkpoint; one whose files stayed on the old backend's side (a stub) is fetched before the
move (`CheckpointStore.held_resume_point`), since the new backend cannot reach them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from orchestrator.models import Job
from orchestrator.spec import JobSpec
from orchestrator.transitions import record_event
from worker.boundary.contract import CheckpointRef


def moved_spec(spec: dict[str, Any], backend: str, kaggle: dict[str, Any] | None) -> dict[str, Any]:
    """`spec` for `backend`: Kaggle options dropped when it leaves Kaggle, taken from `kaggle`
    (else the job's own) when it goes there. Raises pydantic's ValidationError for a spec the
    other backend refuses."""
    moved = {key: value for key, value in spec.items() if key != "kaggle"}
    moved["backend"] = backend
    if backend == "kaggle":
        moved["kaggle"] = kaggle if kaggle is not None else spec.get("kaggle")
    return JobSpec.model_validate(moved).model_dump(mode="json")


def switch_backend(
    session: Session,
    job: Job,
    spec: dict[str, Any],
    resume: CheckpointRef | None,
    why: str = "",
) -> None:
    """Point `job` (loaded in `session`) at the backend `spec` (from `moved_spec`) names."""
    moved_from = job.backend
    job.backend, job.spec, job.slot_key = spec["backend"], spec, None
    step = resume.step if resume is not None else 0
    record_event(
        session,
        job.id,
        "moved",
        message=f"moved from {moved_from} to {job.backend}{why}; continues from step {step}",
    )
