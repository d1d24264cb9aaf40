"""`python -m benchmarks.load`: the API and Celery at scale over 10,000 jobs in PostgreSQL.

1. Seeds N jobs (each waiting on a quota refresh a day away, with two finished segments) into a
   fresh PostgreSQL schema, behind the API as its own process (uvicorn, no reconcile loop).
2. From a second process (benchmarks/fixed_rate.py), sends GET /api/v1/jobs/{id}, the paginated
   job list and a trivial endpoint (/livez: no database) at a fixed rate, in alternating
   phases so that a change in the machine's load hits all three alike, and reports p50/p99 of
   each and the ratios to the trivial endpoint.
3. Starts beat and two Celery workers and times how long they take to visit every job once
   (a visit sets the job's next_attempt_at: here, to its quota refresh).

With --breakdown, each API process also records where every request's time went (threads, SQL,
connection, gc: benchmarks/breakdown.py) and PostgreSQL's wait events and checkpoints are
sampled (benchmarks/pg_activity.py); each half then prints them beside its latencies.

Each run prints, at its end, every half as a Markdown table (p50 / p99 / worst one-second p99,
the rate served, the machine's CPU split and the API's CPU per request), and the last lines
give per run its date, commit, load average at the start and end, how many halves met each of
the issue's targets and the visits' time. `--runs N` makes N consecutive runs, each from a fresh
schema, API and Redis (about 4 minutes each on 2 cores).

Bounded in count (requests, jobs) and in time (every wait has a limit). Writes
benchmarks/results/load.json (the last run's figures under "api" and "visits", every run of
the invocation under "runs").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, select, text

from benchmarks import breakdown
from benchmarks.pg_activity import APPLICATION_NAME, PgSampler
from orchestrator.models import Job, Segment, User, utcnow
from tests.factories import ADMIN_TOKEN
from tests.scale.cluster import Cluster, RedisServer
from tests.support.databases import postgres_schema

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "load.json"
SPEC = {
    "name": "load",
    "backend": "local",
    "trainer": "trainers.tiny_lm:TinyCharLM",
    "config": {"lr": 0.003},
    "total_steps": 1200,
    "seed": 0,
    "session": {"limit_seconds": 600, "margin": {"k_steps": 2.0, "safety_seconds": 1.0}},
    "retry": {"max_failures": 3},
}


def seed(database_url: str, jobs: int) -> list[str]:
    """N waiting jobs of the admin, two finished segments each; returns their ids."""
    engine = create_engine(database_url)
    now = utcnow()
    ids = [f"j{index:012x}" for index in range(jobs)]
    with engine.begin() as connection:
        admin = connection.scalar(select(User.id).where(User.name == "admin"))
        job_rows = [
            {
                "id": job_id,
                "user_id": admin,
                "name": f"load-{index}",
                "backend": "local",
                "state": "waiting",
                "spec": SPEC,
                "total_steps": 1200,
                "steps_done": 800,
                "failures": 0,
                "pause_requested": False,
                "wait_until": now + timedelta(days=1),
                "reason": "waiting for the quota refresh",
                "created_at": now - timedelta(seconds=jobs - index),
                "updated_at": now,
                "started_at": now - timedelta(hours=1),
            }
            for index, job_id in enumerate(ids)
        ]
        segment_rows = [
            {
                "job_id": job_id,
                "index": index,
                "state": "succeeded",
                "launch_id": f"{job_id}-{index:04d}",
                "handle": f"{job_id}-{index:04d}",
                "start_step": 400 * index,
                "end_step": 400 * (index + 1),
                "outcome": "deadline",
                "limit_seconds": 600,
                "launch_spec": {},
                "stop_requested": False,
                "timings": {"startup": 3.0, "train": 590.0, "save": 1.0, "total": 595.0},
                "created_at": now - timedelta(hours=1),
                "launched_at": now - timedelta(hours=1),
                "ended_at": now - timedelta(minutes=50),
            }
            for job_id in ids
            for index in range(2)
        ]
        for start in range(0, len(job_rows), 2000):
            connection.execute(insert(Job), job_rows[start : start + 2000])
        for start in range(0, len(segment_rows), 4000):
            connection.execute(insert(Segment), segment_rows[start : start + 4000])
    # As autovacuum leaves a table that has been in use: statistics and the visibility map set,
    # so a count can use the index alone. Then the seeding's writes are flushed now, not by a
    # checkpoint in the middle of a measurement.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))
        connection.execute(text("CHECKPOINT"))
    engine.dispose()
    return ids


def measure_api(
    url: str, ids: list[str], rate: float, requests: int, server_pid: int | None = None
) -> list[dict[str, Any]]:
    picker = random.Random(0)
    pages = len(ids) // 50
    job_paths = [f"/api/v1/jobs/{picker.choice(ids)}" for _ in range(requests)]
    list_paths = [
        f"/api/v1/jobs?limit=50&offset={50 * picker.randrange(pages)}" for _ in range(requests)
    ]
    # Alternating phases, twice over: a shift in the machine's load hits all three alike. First,
    # a warm-up (discarded) at the same rate: database connections, prepared statements, caches.
    half = requests // 2
    warm_up = {"name": "warm-up", "paths": job_paths, "requests": requests // 2}
    phases = [warm_up] + [
        {"name": name, "paths": paths[i * half : (i + 1) * half], "requests": half}
        for i in range(2)
        for name, paths in (
            ("trivial", ["/livez"] * requests),
            ("job", job_paths),
            ("list", list_paths),
        )
    ]
    plan = {
        "url": url,
        "token": ADMIN_TOKEN,
        "rate": rate,
        "phases": phases,
        "server_pid": server_pid,
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fixed_rate"],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120 + 30 * requests / rate,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return [result for result in results if result["name"] != warm_up["name"]]


_PATHS = {"trivial": "/livez", "job": "/api/v1/jobs/", "list": "/api/v1/jobs"}


def add_breakdown(
    results: list[dict[str, Any]], requests: list[dict[str, Any]], pg: PgSampler
) -> None:
    """Each half's server-side breakdown (benchmarks/breakdown.py) and PostgreSQL's activity."""
    for result in results:
        start, end = result["started_at"], result["ended_at"]
        own = breakdown.of_phase(requests, _PATHS[result["name"]], start, end)
        postgres = {"postgres": pg.during(start, end)}
        result["breakdown"] = breakdown.summarize_requests(own) | postgres


def show_halves(rate: str, figures: dict[str, dict[str, Any]]) -> None:
    for name, entry in figures.items():
        for number, half in enumerate(entry["halves"], 1):
            machine = half["machine"]
            print(
                f"{rate} {name} half {number}: p50 {half['p50_ms']} / p99 {half['p99_ms']} / "
                f"worst second {half['worst_second_p99_ms']} ms, {half['achieved_rate']}/s; "
                f"machine busy {machine.get('busy_pct')} %, nice {machine.get('nice_pct')} %, "
                f"iowait {machine.get('iowait_pct')} %, steal {machine.get('steal_pct')} %; "
                f"API CPU {half.get('server_cpu_ms_per_request')} ms a request"
            )
            if "breakdown" in half:
                print(f"    server side: {json.dumps(half['breakdown'])}")


def merge_halves(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The two halves of each endpoint side by side, and the worse p99 as its figure."""
    merged: dict[str, dict[str, Any]] = {}
    for result in results:
        entry = merged.setdefault(result["name"], {"halves": []})
        entry["halves"].append(result)
    for entry in merged.values():
        halves = entry["halves"]
        entry["p50_ms"] = max(half["p50_ms"] for half in halves)
        entry["p99_ms"] = max(half["p99_ms"] for half in halves)
        entry["errors"] = sum(half["errors"] for half in halves)
    return merged


def with_ratios(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for name in ("job", "list"):
        for figure in ("p50", "p99"):
            ratio = figures[name][f"{figure}_ms"] / figures["trivial"][f"{figure}_ms"]
            figures[name][f"{figure}_ratio"] = round(ratio, 2)
    return figures


def time_visits(cluster: Cluster, database_url: str, jobs: int, timeout: float) -> dict[str, Any]:
    """Starts beat and two workers; seconds until every job was visited once, or how many were
    visited when `timeout` ran out."""
    engine = create_engine(database_url)
    visited = text("SELECT count(*) FROM jobs WHERE next_attempt_at IS NOT NULL")
    start = time.monotonic()
    for role in ("worker-1", "worker-2", "beat"):
        cluster.start(role)
    first = None
    try:
        while True:
            with engine.connect() as connection:
                count = connection.scalar(visited) or 0
            now = time.monotonic()
            if count and first is None:
                first = now
            if count >= jobs or now - start > timeout:
                break
            time.sleep(0.25)
    finally:
        engine.dispose()
    since_first = now - first if first is not None else 0.0
    return {
        "visited": count,
        "all_visited": count >= jobs,
        "seconds_from_start": round(now - start, 1),
        "seconds_from_first_visit": round(since_first, 1),
        "jobs_per_second": round(count / since_first, 1) if since_first else 0.0,
    }


# The targets (25), each half at 200 req/s: GET job p99 and worst one-second p99, the
# list's served rate and p99; and the visits of every job from the first one.
TARGETS = {
    "job_p99_ms": 50.0,
    "job_worst_second_ms": 100.0,
    "list_served_per_s": 199.0,
    "list_p99_ms": 100.0,
    "visits_seconds": 10.0,
}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()}"


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    return done.stdout.strip() or "unknown"


def verdict(api: dict[str, Any], visits: dict[str, Any] | None, rate: float) -> dict[str, Any]:
    """Each target, half by half, at the full rate: met or not, with the figure."""
    halves: dict[str, list[bool]] = {}
    full = api.get(f"{rate:g}_per_s")
    if full is not None:
        job, listed = full["job"]["halves"], full["list"]["halves"]
        halves["job_p99"] = [h["p99_ms"] < TARGETS["job_p99_ms"] for h in job]
        halves["job_worst_second"] = [
            h["worst_second_p99_ms"] < TARGETS["job_worst_second_ms"] for h in job
        ]
        halves["list_served"] = [h["achieved_rate"] >= TARGETS["list_served_per_s"] for h in listed]
        halves["list_p99"] = [h["p99_ms"] < TARGETS["list_p99_ms"] for h in listed]
    met = {name: sum(flags) for name, flags in halves.items()}
    out: dict[str, Any] = {"halves_met": met, "halves": {k: len(v) for k, v in halves.items()}}
    if visits is not None:
        out["visits_met"] = bool(
            visits["all_visited"] and visits["seconds_from_first_visit"] < TARGETS["visits_seconds"]
        )
    return out


def _split(half: dict[str, Any]) -> str:
    share = half["machine"]
    return (
        f"{share.get('busy_pct')} / {share.get('nice_pct')} / {share.get('iowait_pct')} / "
        f"{share.get('steal_pct')}"
    )


def halves_table(run: dict[str, Any]) -> str:
    """Every half of one run as a Markdown table (the README's format)."""
    lines = [
        "| rate | endpoint | half | p50 / p99 / worst second (ms) | served | "
        "machine CPU % busy / nice / iowait / steal | API CPU ms a request |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rate, figures in run.get("api", {}).items():
        if not isinstance(figures, dict) or "trivial" not in figures:
            continue
        for name, entry in figures.items():
            for number, half in enumerate(entry["halves"], 1):
                lines.append(
                    f"| {rate.replace('_per_s', '/s')} | {name} | {number} | "
                    f"{half['p50_ms']} / {half['p99_ms']} / {half['worst_second_p99_ms']} | "
                    f"{half['achieved_rate']}/s | {_split(half)} | "
                    f"{half.get('server_cpu_ms_per_request')} |"
                )
    return "\n".join(lines)


def runs_table(runs: list[dict[str, Any]]) -> str:
    """One line per run: conditions, the targets met half by half, and the visits."""
    lines = [
        "| run (UTC) | commit | load avg at start / end | GET job p99 < 50 ms | "
        "worst second < 100 ms | list >= 199/s | list p99 < 100 ms | visits (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        met, of = run["verdict"]["halves_met"], run["verdict"]["halves"]
        start = run["load_average_at_start"][0]
        end = run["load_average_at_end"][0]
        visits = run.get("visits") or {}

        def cell(name: str, met: dict[str, int] = met, of: dict[str, int] = of) -> str:
            return f"{met[name]} of {of[name]}" if name in met else "not run"

        lines.append(
            f"| {run['date']} | {run['commit']} | {start:.2f} / {end:.2f} | {cell('job_p99')} | "
            f"{cell('job_worst_second')} | {cell('list_served')} | {cell('list_p99')} | "
            f"{visits.get('seconds_from_first_visit', 'not run')} |"
        )
    return "\n".join(lines)


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One run: a fresh schema, API, seed, the API's phases, the visits."""
    load_at_start = os.getloadavg()
    began = time.monotonic()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    code = commit()  # what was measured: the checkout at the start
    print(f"run at {date}, load average {load_at_start} at the start", flush=True)
    with tempfile.TemporaryDirectory(prefix="baton-load-") as tmp, postgres_schema() as schema_url:
        # Named, so that PostgreSQL's activity can be told from other clients of the server.
        db_url = f"{schema_url}&application_name={APPLICATION_NAME}"
        redis = RedisServer(Path(tmp) / "redis")
        redis.start()
        traces = Path(tmp) / "breakdown"
        cluster = Cluster(
            Path(tmp) / "cluster",
            db_url,
            redis.url,
            "http://127.0.0.1:9",
            api_workers=args.api_workers,
        )
        if args.breakdown:
            cluster.env["BATON_BREAKDOWN_DIR"] = str(traces)
        pg = PgSampler(db_url)
        try:
            cluster.start("api")
            cluster.wait_for_api(timeout=300)  # a loaded machine starts it slowly
            started = time.monotonic()
            ids = seed(db_url, args.jobs)
            seeded = time.monotonic() - started
            print(f"seeded {args.jobs} jobs and {2 * args.jobs} segments in {seeded:.1f} s")
            api: dict[str, Any] = {}
            if args.api:
                if args.breakdown:
                    pg.start()
                # The same mix at a tenth of the rate: what one request costs when the server is
                # not queueing (on a shared machine, what is left of its 2 cores).
                runs = {
                    f"{rate:g}_per_s": measure_api(
                        cluster.api_url, ids, rate, requests, cluster.procs["api"].pid
                    )
                    for rate, requests in (
                        (args.rate / 10, args.requests // 10),
                        (args.rate, args.requests),
                    )
                }
                if args.breakdown:
                    pg.stop()
                    recorded = breakdown.read_requests(traces)
                    for results in runs.values():
                        add_breakdown(results, recorded, pg)
                api = {rate: with_ratios(merge_halves(results)) for rate, results in runs.items()}
            for rate, figures in api.items():
                shown = {k: {x: v[x] for x in v if x != "halves"} for k, v in figures.items()}
                print(rate, json.dumps(shown))
                show_halves(rate, figures)
            visits = None
            if args.visits:
                visits = time_visits(cluster, db_url, args.jobs, args.visit_timeout)
                print(
                    f"beat + 2 workers visited {visits['visited']} of {args.jobs} jobs in "
                    f"{visits['seconds_from_first_visit']} s from the first visit: "
                    f"{visits['jobs_per_second']} jobs/s ({visits})"
                )
        finally:
            cluster.stop_all()
            redis.kill()
    return {
        "date": date,
        "commit": code,
        "machine": machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "seconds": round(time.monotonic() - began, 1),
        "jobs": args.jobs,
        "api_workers": args.api_workers,
        "breakdown": args.breakdown,
        "rate": args.rate,
        "per_endpoint": args.requests,
        "api": api,
        "visits": visits,
        "verdict": verdict(api, visits, args.rate),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--requests", type=int, default=4000, help="per endpoint: 20 s at 200/s")
    parser.add_argument("--api-workers", type=int, default=2, help="as in docker-compose.yml")
    parser.add_argument("--visit-timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON record to update")
    parser.add_argument("--no-visits", dest="visits", action="store_false")
    parser.add_argument("--no-api", dest="api", action="store_false")
    parser.add_argument(
        "--runs", type=int, default=1, help="consecutive runs, each from a fresh schema"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="record where each request's time went in the API (SQL, pool, gc) and PostgreSQL's "
        "wait events and checkpoints, and print them per half",
    )
    args = parser.parse_args()
    print(f"machine: {machine()}; commit {commit()}")
    done = []
    for number in range(1, args.runs + 1):
        if args.runs > 1:
            print(f"--- run {number} of {args.runs}", flush=True)
        run = run_once(args)
        done.append(run)
        print(
            f"every half of this run ({run['seconds']} s, load average at the end "
            f"{run['load_average_at_end']}):"
        )
        print(halves_table(run))
    print(f"\ntargets (issue 25), half by half at {args.rate:g} req/s: {json.dumps(TARGETS)}")
    print(runs_table(done))
    # A run of one part (--no-api, --no-visits) keeps the other part's last figures.
    record = json.loads(args.out.read_text()) if args.out.exists() else {}
    last = done[-1]
    conditions = {k: v for k, v in last.items() if k not in ("api", "visits", "verdict")}
    if last["api"]:
        record["api"] = conditions | last["api"]
    if last["visits"]:
        record["visits"] = conditions | last["visits"]
    record["runs"] = done
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
