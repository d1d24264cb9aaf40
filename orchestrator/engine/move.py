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


def switch_backend(
    session: Session,
    job: Job,
    backend: str,
    kaggle: dict[str, Any] | None,
    resume: CheckpointRef | None,
    why: str = "",
) -> None:
    """Point `job` (loaded in `session`) at `backend`: Kaggle options are dropped when it
    leaves Kaggle and taken from `kaggle` (else the job's own) when it goes there. Raises
    pydantic's ValidationError for a spec the other backend refuses."""
    spec = {key: value for key, value in job.spec.items() if key != "kaggle"}
    spec["backend"] = backend
    if backend == "kaggle":
        spec["kaggle"] = kaggle if kaggle is not None else job.spec.get("kaggle")
    validated = JobSpec.model_validate(spec).model_dump(mode="json")
    moved_from = job.backend
    job.backend, job.spec, job.slot_key = backend, validated, None
    step = resume.step if resume is not None else 0
    record_event(
        session,
        job.id,
        "moved",
        message=f"moved from {moved_from} to {backend}{why}; continues from step {step}",
    )
