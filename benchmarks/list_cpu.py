"""`python -m benchmarks.list_cpu`: the API's CPU per request, in-process, on PostgreSQL.

At 200 requests a second the job list is limited by the API's CPU, not by waiting: the load
benchmark (benchmarks/load.py) measured 6.8-7.2 ms of API CPU per page, 1.4 of this machine's 2
cores before PostgreSQL and the client get theirs. This measures that cost without HTTP or a
second process, so that it hardly depends on what else the machine runs:

- seeds N jobs with two finished segments each (as the load benchmark does) into a fresh
  PostgreSQL schema, and builds the app as `baton serve` does (start-up objects frozen);
- calls the ASGI app directly for `/livez`, `GET` a job, a list page by `offset` and one by
  `cursor` (authentication, middleware, FastAPI and the handler's threads included), and the
  list read alone, as it is and as it was before (the baseline: ORM rows, a separate count and
  segments statement, each summary validated again), in interleaved rounds;
- prints the median over rounds of CPU milliseconds per request (the process's user + system
  time, all threads) and the statements each one ran.

`--profile` also prints where a list page's CPU goes (cProfile, the handler's work called on
this thread). Writes benchmarks/results/list_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response, status
from sqlalchemy import Engine, case, event, func, select
from sqlalchemy.orm import Session

from benchmarks.load import seed
from orchestrator import queries
from orchestrator.api.deps import ServicesDep, client_address, refuse_if_throttled
from orchestrator.api.main import create_app, freeze_start_up_objects
from orchestrator.auth import hash_token, record_use, token_for
from orchestrator.models import ApiToken, Job, Segment, User, utcnow
from orchestrator.service import Services, build_services, prestart
from orchestrator.wire import JobList, JobOut, JobSummary
from tests.factories import ADMIN_TOKEN, make_settings
from tests.scale.cluster import postgres_schema

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "list_cpu.json"
PAGE = 50


# The baseline: the reads as they were before this benchmark's changes (commit b67d1cd), served
# by the same app under /baseline/ (same middleware, same hand-offs to threads). The progress
# and ETA are computed by today's code for both.


def baseline_token_for(session: Session, token: str) -> tuple[ApiToken, User] | None:
    """The token and its user loaded as ORM rows, the statement built at each call."""
    found = session.execute(
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == hash_token(token))
    ).first()
    return None if found is None else (found[0], found[1])


@dataclass(slots=True)
class BaselineSegmentRow:
    job_id: str
    index: int
    state: str
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings: dict[str, Any] | None
    progress: dict[str, Any] | None
    launch_spec: dict[str, Any] | None
    launched_at: datetime | None
    ended_at: datetime | None


def baseline_segments(session: Session, job_ids: list[str]) -> dict[str, list[Any]]:
    live = Segment.state.in_(queries._ACTIVE)
    rows = session.execute(
        select(
            Segment.job_id,
            Segment.index,
            Segment.state,
            Segment.start_step,
            Segment.end_step,
            Segment.limit_seconds,
            Segment.timings,
            case((live, Segment.progress)).label("progress"),
            case((live, Segment.launch_spec)).label("launch_spec"),
            Segment.launched_at,
            Segment.ended_at,
        )
        .where(Segment.job_id.in_(job_ids))
        .order_by(Segment.job_id, Segment.index)
    )
    found: dict[str, list[Any]] = {}
    for row in rows:
        found.setdefault(row.job_id, []).append(BaselineSegmentRow(*row))
    return found


def _summary(out: JobSummary, job: Job, segments: list[Any]) -> JobSummary:
    session = queries.SessionLimits.of_spec(job.spec)
    out.progress, out.eta = queries._progress_and_eta(
        job, segments, session=session, now=None, quota=None
    )
    return out


def baseline_list(session: Session, user_id: str, offset: int) -> JobList:
    """ORM Job rows; the count, the page and the segments as three statements; each summary
    validated from its ORM row."""
    mine = [Job.user_id == user_id]
    total = session.scalar(select(func.count()).select_from(Job).where(*mine)) or 0
    order = (Job.created_at.desc(), Job.id.desc())
    page = select(Job.id).where(*mine).order_by(*order).limit(PAGE).offset(offset)
    rows = list(
        session.scalars(select(Job).where(Job.id.in_(page.scalar_subquery())).order_by(*order))
    )
    history = baseline_segments(session, [job.id for job in rows])
    items = [_summary(JobSummary.model_validate(job), job, history.get(job.id, [])) for job in rows]
    return JobList(items=items, total=total)


def baseline_get_job(session: Session, user_id: str, job_id: str) -> JobOut:
    job = queries.own_job(session, user_id, job_id)
    segments = baseline_segments(session, [job.id]).get(job.id, [])
    out = _summary(JobOut.model_validate(job), job, segments)
    assert isinstance(out, JobOut)
    return out


def baseline_caller(request: Request, services: ServicesDep) -> User:
    """deps.current_caller with the token read as before."""
    client = client_address(request)
    refuse_if_throttled(services, client)
    token = request.headers["authorization"].removeprefix("Bearer ")
    now = utcnow()
    with services.db.reading() as session:
        found = baseline_token_for(session, token)
    if found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED)
    row, user = found
    with services.db.transaction() as session:
        record_use(session, row, now)
    return user


BaselineUser = Annotated[User, Depends(baseline_caller)]
# GET /baseline/jobs?offset= and /baseline/jobs/{id}: the list page and the job as served before.
baseline = APIRouter(prefix="/baseline")


@baseline.get("/jobs")
def baseline_jobs(user: BaselineUser, services: ServicesDep, offset: int = 0) -> Response:
    with services.db.reading() as session:
        listing = baseline_list(session, user.id, offset)
    return Response(listing.model_dump_json(), media_type="application/json")


@baseline.get("/jobs/{job_id}")
def baseline_job(job_id: str, user: BaselineUser, services: ServicesDep) -> Response:
    with services.db.reading() as session:
        found = baseline_get_job(session, user.id, job_id)
    return Response(found.model_dump_json(), media_type="application/json")


class Statements:
    """How many statements the engine ran since the last `take()`."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: Any) -> None:
        self.count += 1

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


async def call(app: FastAPI, path: str, query: str = "") -> bytes:
    """One GET through the whole ASGI app (middleware, auth, FastAPI, handler threads)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"authorization", f"Bearer {ADMIN_TOKEN}".encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise AssertionError(f"{path}?{query}: {sent[0]['status']} {sent[1:]}")
    return b"".join(message.get("body", b"") for message in sent[1:])


def _without_eta(body: bytes) -> Any:
    answer = json.loads(body)
    for item in answer.get("items", [answer]):
        item.pop("eta", None)
    return answer


async def cpu_ms_per_call(run: Callable[[], Awaitable[object]], calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        await run()
    return 1000 * (time.process_time() - started) / calls


async def measure(
    app: FastAPI, services: Services, ids: list[str], rounds: int, calls: int
) -> dict[str, dict[str, float]]:
    """Run inside one event loop, as uvicorn's: its worker threads (anyio's) live as long as
    the loop's first task, so a loop per call would start a thread per request."""
    with services.db.reading() as session:
        found = token_for(session, ADMIN_TOKEN, utcnow())
    assert found is not None
    user_id = found[1].id
    middle = PAGE * (len(ids) // PAGE // 2)
    after = json.loads(await call(app, "/api/v1/jobs", f"limit={PAGE}"))["next_cursor"]

    def via_app(path: str, query: str = "") -> Callable[[], Awaitable[object]]:
        return lambda: call(app, path, query)

    def read(function: Callable[[Any], JobList]) -> Callable[[], Awaitable[object]]:
        async def run() -> None:  # on this thread: the handler's work without the hand-off
            with services.db.reading() as session:
                function(session).model_dump_json()

        return run

    job = f"/api/v1/jobs/{ids[len(ids) // 2]}"
    offset = f"limit={PAGE}&offset={middle}"
    cases: dict[str, Callable[[], Awaitable[object]]] = {
        "livez": via_app("/livez"),
        "get_job": via_app(job),
        "get_job_baseline": via_app(job.replace("/api/v1/", "/baseline/")),
        "list_offset": via_app("/api/v1/jobs", offset),
        "list_offset_baseline": via_app("/baseline/jobs", f"offset={middle}"),
        "list_cursor": via_app("/api/v1/jobs", f"limit={PAGE}&cursor={after}"),
        "list_read": read(
            lambda session: queries.list_jobs(session, user_id, limit=PAGE, offset=middle)
        ),
        "list_read_baseline": read(lambda session: baseline_list(session, user_id, middle)),
    }
    # The same answers (but for the ETA, which moves with the clock), or the comparison is void.
    baseline_job = job.replace("/api/v1/", "/baseline/")
    assert _without_eta(await call(app, job)) == _without_eta(await call(app, baseline_job))
    listed = _without_eta(await call(app, "/api/v1/jobs", offset))
    before = _without_eta(await call(app, "/baseline/jobs", f"offset={middle}"))
    assert listed["items"] == before["items"]
    assert listed["total"] == before["total"]
    counter = Statements(services.db.engine)
    statements = {}
    for name, run in cases.items():  # warm-up: caches, prepared statements, pool, threads
        for _ in range(20):
            await run()
        counter.take()
        await run()
        statements[name] = counter.take()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # interleaved: a change in the machine's load hits all alike
        for name, run in cases.items():
            samples[name].append(await cpu_ms_per_call(run, calls))
    return {
        name: {
            "cpu_ms_median": round(statistics.median(values), 3),
            "cpu_ms_min": round(min(values), 3),
            "statements": statements[name],
        }
        for name, values in samples.items()
    }


def profile(services: Services, user_id: str, offset: int, calls: int) -> str:
    """cProfile of the list handler's work (auth's read, the list read, the JSON), on this
    thread, by CPU time."""
    profiler = cProfile.Profile(time.process_time)

    def page() -> None:
        with services.db.reading() as session:
            token_for(session, ADMIN_TOKEN, utcnow())
        with services.db.reading() as session:
            queries.list_jobs(session, user_id, limit=PAGE, offset=offset).model_dump_json()

    for _ in range(20):
        page()
    profiler.enable()
    for _ in range(calls):
        page()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100, help="requests per case and round")
    parser.add_argument("--profile", action="store_true", help="print a list page's profile")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    with postgres_schema() as url, tempfile.TemporaryDirectory(prefix="baton-list-") as tmp:
        settings = make_settings(Path(tmp) / "data", database_url=url)
        prestart(settings)
        ids = seed(url, args.jobs)
        services = build_services(settings, embedded_loop=False)
        try:
            app = create_app(services)
            app.include_router(baseline)
            freeze_start_up_objects()
            figures = asyncio.run(measure(app, services, ids, args.rounds, args.calls))
            if args.profile:
                with services.db.reading() as session:
                    found = token_for(session, ADMIN_TOKEN, utcnow())
                assert found is not None
                middle = PAGE * (len(ids) // PAGE // 2)
                print(profile(services, found[1].id, middle, args.calls * 2))
        finally:
            services.db.dispose()
    # What each change saved, measured in this run: now against the baseline.
    compared = {
        name: round(
            figures[f"{name}_baseline"]["cpu_ms_median"] / figures[name]["cpu_ms_median"], 2
        )
        for name in ("get_job", "list_offset", "list_read")
    }
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "jobs": args.jobs,
        "page": PAGE,
        "rounds": args.rounds,
        "calls": args.calls,
        "cpu_ms_per_request": figures,
        "baseline_over_now": compared,
    }
    width = max(map(len, figures))
    print(f"{args.jobs} jobs, pages of {PAGE}; load average {load_at_start} at the start")
    print(f"{'request':<{width}}  CPU ms (median / min)  statements")
    for name, figure in figures.items():
        print(
            f"{name:<{width}}  {figure['cpu_ms_median']:>8.3f} / {figure['cpu_ms_min']:<8.3f}"
            f"  {figure['statements']}"
        )
    for name, ratio in compared.items():
        print(f"{name}: the baseline costs {ratio}x the CPU of now")
    for name in ("list_offset", "list_offset_baseline"):
        cores = figures[name]["cpu_ms_median"] * 200 / 1000
        print(f"200 pages a second by {name}: {cores:.2f} cores of API CPU")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
