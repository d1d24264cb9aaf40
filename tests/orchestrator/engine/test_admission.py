"""Local capacity is admission: with 2 slots, 10 jobs run at most 2 sessions at any moment, first
come first served, and every one of them still ends on the uninterrupted digest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.factories import job_spec, make_settings, reference_digest, running_api, wait_finished
from worker.boundary.paths import STATUS_FILE

pytestmark = pytest.mark.slow

JOBS = 10
SPEC = job_spec(total_steps=20)


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, change in edges:
        running += change
        most = max(most, running)
    return most


def test_ten_jobs_share_two_local_slots(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", local_slots=2)
    with running_api(settings) as api:
        job_ids = [api.post("/api/v1/jobs", json=SPEC).json()["id"] for _ in range(JOBS)]
        finished = [wait_finished(api, job_id, timeout=600) for job_id in job_ids]
        last = job_ids[-1]
        waited = [
            e
            for e in api.get(f"/api/v1/jobs/{last}/events").json()
            if e["kind"] == "queued_for_slot"
        ]
        segments = {job_id: api.get(f"/api/v1/jobs/{job_id}/segments").json() for job_id in job_ids}
    digests = {segments[job_id][-1]["checkpoint"]["model_digest"] for job_id in job_ids}
    assert [job["state"] for job in finished] == ["succeeded"] * JOBS
    assert digests == {reference_digest(SPEC, tmp_path / "reference")}
    assert len(waited) == 1
    assert "slot" in waited[0]["message"]
    sessions = {
        path.parent.name.rsplit("-", 1)[0]: json.loads(path.read_text())
        for path in settings.sessions_dir.glob(f"*/{STATUS_FILE}")
    }
    assert sorted(sessions) == sorted(job_ids)
    assert _most_at_once([(s["started_at"], s["ended_at"]) for s in sessions.values()]) <= 2
    # First come, first served: the slots went to the jobs in the order they were submitted (each
    # job's first segment is planned when it gets its slot). Not the sessions' own start times:
    # two launched in one tick start in whatever order their processes come up.
    first_planned = {job_id: segments[job_id][0]["created_at"] for job_id in job_ids}
    assert sorted(job_ids, key=first_planned.__getitem__) == job_ids
