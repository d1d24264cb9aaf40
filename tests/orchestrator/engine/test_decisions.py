"""The view the lifecycle rules read of a job comes from its stored spec, typed: the retry limit
and the divergence policy the user submitted, not defaults."""

from __future__ import annotations

from orchestrator.engine.decisions import job_view
from orchestrator.lifecycle import JobState
from orchestrator.models import Job
from tests.factories import job_spec


def _job(spec: dict[str, object]) -> Job:
    return Job(
        id="j1",
        user_id="u1",
        backend="local",
        state="running",
        spec=spec,
        total_steps=50,
        steps_done=20,
        failures=1,
        pause_requested=False,
    )


def test_the_view_carries_the_submitted_retry_limit_and_divergence_policy() -> None:
    session = {"limit_seconds": 60, "watchdog": {"on_divergence": "rollback"}}
    view = job_view(_job(job_spec(retry={"max_failures": 5}, session=session)), rollbacks=1)
    assert (view.state, view.steps_done, view.failures) == (JobState.RUNNING, 20, 1)
    assert (view.max_failures, view.rollback_on_divergence, view.rollbacks) == (5, True, 1)


def test_the_defaults_are_the_spec_s_own() -> None:
    spec = job_spec()
    del spec["retry"]
    view = job_view(_job(spec))
    assert (view.max_failures, view.rollback_on_divergence) == (3, False)
