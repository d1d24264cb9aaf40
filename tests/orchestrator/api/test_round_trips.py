"""The database round trips of the two requests every open page and CLI `watch` repeats: `GET`
a job (2: the token, then the job with its segments) and a page of the job list (2: the token,
then the count, the page's jobs and all their segments in one statement; an empty page counts
apart), whatever the number of jobs and segments, on two connections from the pool (each
pinged first on PostgreSQL: one round trip more each). Counted with SQLAlchemy's cursor and
pool events, so an N+1, an extra query or an extra connection cannot creep back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from orchestrator.lifecycle import SegmentState
from orchestrator.models import Segment
from tests.factories import job_spec, make_settings, running_api

GET_JOB_STATEMENTS = 2
LIST_PAGE_STATEMENTS = 2
EMPTY_PAGE_STATEMENTS = 3  # no row to carry the count: it runs apart


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", database_url=database_url)
    with running_api(settings, embedded_loop=False) as client:
        yield client


@contextmanager
def statements(client: TestClient) -> Iterator[list[str]]:
    """The statements run, and "checkout" for each connection taken from the pool (on
    PostgreSQL each is pinged first: one more round trip)."""
    engine = client.app.state.services.db.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    def checkout(*args: Any) -> None:
        seen.append("checkout")

    event.listen(engine, "before_cursor_execute", count)
    event.listen(engine, "checkout", checkout)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)
        event.remove(engine, "checkout", checkout)


def counted(seen: list[str]) -> tuple[int, int]:
    """(statements, connections taken)."""
    taken = seen.count("checkout")
    return len(seen) - taken, taken


def _jobs_with_segments(client: TestClient, jobs: int, segments: int) -> list[str]:
    ids = [client.post("/api/v1/jobs", json=job_spec()).json()["id"] for _ in range(jobs)]
    services = client.app.state.services  # type: ignore[attr-defined]
    with services.db.transaction() as session:
        for job_id in ids:
            for index in range(segments):
                session.add(
                    Segment(
                        job_id=job_id,
                        index=index,
                        state=SegmentState.SUCCEEDED.value,
                        launch_id=f"{job_id}-{index:04d}",
                        start_step=index,
                        end_step=index + 1,
                        limit_seconds=60,
                        launch_spec={},
                        timings={"startup": 1.0, "train": 50.0, "save": 1.0},
                        metrics=[{"step": index, "loss": 1.0}],
                    )
                )
    return ids


@pytest.mark.parametrize(("jobs", "segments"), [(2, 1), (7, 3)])
def test_get_job_and_a_list_page_cost_a_fixed_number_of_statements(
    api: TestClient, jobs: int, segments: int
) -> None:
    ids = _jobs_with_segments(api, jobs, segments)
    api.get("/api/v1/jobs")  # the token's last use is recorded at most once a minute: now
    with statements(api) as get_job:
        job = api.get(f"/api/v1/jobs/{ids[0]}")
    with statements(api) as list_page:
        page = api.get("/api/v1/jobs", params={"limit": 50})
    cursor = api.get("/api/v1/jobs", params={"limit": 1}).json()["next_cursor"]
    with statements(api) as cursor_page:
        later = api.get("/api/v1/jobs", params={"limit": 50, "cursor": cursor})
    with statements(api) as empty_page:
        past_the_end = api.get("/api/v1/jobs", params={"offset": jobs})
    assert job.status_code == page.status_code == later.status_code == 200
    assert (len(page.json()["items"]), len(later.json()["items"])) == (jobs, jobs - 1)
    assert (page.json()["total"], later.json()["total"]) == (jobs, jobs)
    assert past_the_end.json() == {"items": [], "total": jobs, "next_cursor": None}
    # Each request takes two connections: one to check the token, one for the read.
    assert counted(get_job) == (GET_JOB_STATEMENTS, 2), get_job
    assert counted(list_page) == counted(cursor_page) == (LIST_PAGE_STATEMENTS, 2), list_page
    assert counted(empty_page) == (EMPTY_PAGE_STATEMENTS, 2), empty_page
