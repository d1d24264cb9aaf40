"""/metrics: jobs by state, segments launched and retried, durations, quota used, backend errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.backends.base import Gone, Rejected, Transient
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.metrics import BACKEND_ERRORS, CountingBackend
from orchestrator.models import Segment, utcnow
from tests.factories import job_spec


def _samples(api: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = api.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _segment(job_id: str, index: int, start_step: int, hours_ago: float, seconds: float) -> Segment:
    launched = utcnow() - timedelta(hours=hours_ago)
    return Segment(
        job_id=job_id,
        index=index,
        state="failed",
        launch_id=f"{job_id}-{index:04d}",
        start_step=start_step,
        limit_seconds=60,
        launch_spec={},
        launched_at=launched,
        ended_at=launched + timedelta(seconds=seconds),
    )


def test_metrics_report_what_the_database_holds(api: TestClient, settings: Settings) -> None:
    first, second, third = (
        api.post("/api/v1/jobs", json=job_spec()).json()["id"] for _ in range(3)
    )
    api.post(f"/api/v1/jobs/{third}/cancel")
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        session.add(_segment(first, 0, 0, hours_ago=1, seconds=10))
        session.add(_segment(first, 1, 0, hours_ago=0.5, seconds=100))  # a retry of segment 0
        session.add(_segment(first, 2, 40, hours_ago=0.2, seconds=20))
        session.add(_segment(second, 0, 0, hours_ago=24 * 8, seconds=4000))  # before the week
    db.dispose()

    samples = _samples(api)
    assert samples[("baton_jobs", (("state", "queued"),))] == 2
    assert samples[("baton_jobs", (("state", "cancelled"),))] == 1
    assert samples[("baton_jobs", (("state", "running"),))] == 0
    assert samples[("baton_segments_launched_total", ())] == 4
    assert samples[("baton_segment_retries_total", ())] == 1
    durations = (("backend", "local"),)
    assert samples[("baton_segment_duration_seconds_count", durations)] == 4
    assert samples[("baton_segment_duration_seconds_sum", durations)] == pytest.approx(4130)
    assert samples[("baton_segment_duration_seconds_bucket", (*durations, ("le", "15")))] == 1
    assert samples[("baton_segment_duration_seconds_bucket", (*durations, ("le", "300")))] == 3
    assert samples[("baton_quota_used_seconds", durations)] == pytest.approx(130)


class _FailingBackend:
    name = "kaggle"
    poll_seconds = 30.0
    overrun_slack_seconds = None

    def __init__(self) -> None:
        self.errors = iter([Transient("429", retry_after=30), Rejected("no"), Gone("kernel")])

    def status(self, handle: str) -> object:
        raise next(self.errors)


def test_backend_errors_are_counted_by_kind_and_still_raised(tmp_path: Path) -> None:
    before = {
        kind: BACKEND_ERRORS.labels("kaggle", kind)._value.get()
        for kind in ("transient", "rejected", "gone")
    }
    backend = CountingBackend(_FailingBackend())  # type: ignore[arg-type]
    for expected in (Transient, Rejected, Gone):
        with pytest.raises(expected):
            backend.status("h")
    for kind in ("transient", "rejected", "gone"):
        assert BACKEND_ERRORS.labels("kaggle", kind)._value.get() == before[kind] + 1
