"""Submits that arrive together, while the reconcile loop runs jobs, all get 201 or 422."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

from tests.factories import job_spec, wait_for


def test_20_concurrent_submits_while_jobs_run_never_get_500(live_api: TestClient) -> None:
    long_job = job_spec(total_steps=10_000, config={"step_sleep": 0.05})
    running = [live_api.post("/api/v1/jobs", json=long_job).json()["id"] for _ in range(2)]
    wait_for(live_api, running[0], lambda job: job["state"] == "running", timeout=120)

    specs: list[dict[str, Any]] = []
    for index in range(20):
        if index % 4 == 3:
            specs.append(job_spec(name=f"bad-{index}", trainer="tests.support.trainers:Nope"))
        else:
            specs.append(job_spec(name=f"job-{index}", total_steps=5))
    statuses: list[int] = [0] * len(specs)
    start = threading.Barrier(len(specs))

    def submit(index: int) -> None:
        start.wait()
        statuses[index] = live_api.post("/api/v1/jobs", json=specs[index]).status_code

    threads = [threading.Thread(target=submit, args=(index,)) for index in range(len(specs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expected = [422 if spec["name"].startswith("bad") else 201 for spec in specs]
    assert statuses == expected
    for job_id in running:
        assert live_api.post(f"/api/v1/jobs/{job_id}/cancel").status_code in (200, 409)
