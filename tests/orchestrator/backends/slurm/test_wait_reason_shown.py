"""A segment waiting in Slurm's queue says why, where the user looks: the CLI's job line and
list, beside the API's `queue_reason`."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.cli.render import job_summary, jobs_table
from orchestrator.wire import JobOut


def _waiting_job() -> JobOut:
    now = datetime(2026, 11, 23, tzinfo=UTC)
    return JobOut(
        id="j1",
        name="lm",
        backend="slurm",
        state="running",
        steps_done=0,
        total_steps=100,
        pause_requested=False,
        wait_until=None,
        reason=None,
        queue_reason="waiting in the queue: Resources",
        created_at=now,
        updated_at=now,
        started_at=now,
        finished_at=None,
        failures=0,
        spec={},
    )


def test_the_job_line_says_why_the_segment_waits() -> None:
    assert "waiting in the queue: Resources" in job_summary(_waiting_job())


def test_the_job_list_says_why_the_segment_waits() -> None:
    table = jobs_table([_waiting_job()])
    assert list(table.columns[-1].cells) == ["waiting in the queue: Resources"]
