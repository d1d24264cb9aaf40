"""Bringing a job's trackers up to date with its committed metrics, after each commit.

Each tracker gets only the steps after the last one it was sent (kept per job and tracker in a
small state file beside the runs), so a sync run twice, or after a failed one, neither repeats
nor skips a step. A tracker that fails (its library missing, its server down) leaves an event and
is tried again at the next commit; the training job goes on regardless.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.db import Database
from orchestrator.models import Job
from orchestrator.queries import committed_metrics
from orchestrator.spec import stored_spec
from orchestrator.trackers.writers import StepMetrics, TrackedJob, TrackerWriter, writers_for
from orchestrator.transitions import record_event
from orchestrator.wire import MetricPoint
from worker.boundary.contract import write_json_atomic
from worker.reasons import reason_for

log = logging.getLogger(__name__)

TRACKER_FAILED_EVENT = "tracker_failed"


def by_step(points: Sequence[MetricPoint]) -> list[StepMetrics]:
    """One entry per step: what a loop logs apart for one step (an evaluation) joins it."""
    steps: list[StepMetrics] = []
    for point in points:
        if steps and steps[-1].step == point.step:
            steps[-1].values.update(point.values)
        else:
            steps.append(StepMetrics(point.step, dict(point.values)))
    return steps


@dataclass(frozen=True)
class TrackerSync:
    db: Database
    root: Path
    clock: Callable[[], datetime]

    def state_path(self, job_id: str) -> Path:
        return self.root / "state" / f"{job_id}.json"

    def sync(self, job_id: str, *, finished: bool) -> None:
        """Send each of the job's trackers the committed steps it has not had yet."""
        with self.db.transaction() as session:
            job = session.get(Job, job_id)
            assert job is not None
            trackers = stored_spec(job.spec).trackers
            if trackers is None:
                return
            tracked = TrackedJob(job.id, job.name, dict(job.spec.get("config") or {}))
            steps = by_step(committed_metrics(session, job_id))
        sent = self._read_state(job_id)
        for writer in writers_for(trackers, tracked, self.root):
            last = int(sent.get(writer.name, 0))
            new = [point for point in steps if point.step > last]
            if new and self._write(job_id, writer, new, finished=finished):
                sent[writer.name] = new[-1].step
                self._save_state(job_id, sent)

    def _write(
        self, job_id: str, writer: TrackerWriter, steps: list[StepMetrics], *, finished: bool
    ) -> bool:
        failures: tuple[type[Exception], ...] = (ImportError, OSError, *writer.failures())
        try:
            writer.write(steps, finished=finished, now=self.clock())
        # The boundary to three outside libraries and their servers: a missing library, a file
        # or network error, or the library's own error fails the sync, never the training job.
        # The event says which and why; anything else is a bug in Baton and is raised.
        except failures as exc:
            log.warning("job %s: %s tracker failed", job_id, writer.name, exc_info=True)
            with self.db.transaction() as session:
                record_event(
                    session,
                    job_id,
                    TRACKER_FAILED_EVENT,
                    message=f"{writer.name}: {_failure(exc)}; tried again at the next commit",
                    at=self.clock(),
                )
            return False
        return True

    def _read_state(self, job_id: str) -> dict[str, Any]:
        path = self.state_path(job_id)
        if not path.exists():
            return {}
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def _save_state(self, job_id: str, sent: dict[str, Any]) -> None:
        path = self.state_path(job_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, sent)


def _failure(exc: Exception) -> str:
    if isinstance(exc, ImportError):
        missing = exc.name or "its library"
        return f"{missing} is not installed on the server (pip install 'baton[trackers]')"
    return reason_for(exc)
