"""Where a request's time goes inside an API process: the load benchmark's breakdown mode.

`install(app, engine, directory)` (tests/scale/processes.py calls it when BATON_BREAKDOWN_DIR is
set) adds an ASGI middleware that times each request from its arrival to its last byte, and
splits that time with:
- FastAPI's hand-off to its threads: the wait for a thread, and the time spent on one;
- SQLAlchemy's cursor events: time in SQL statements, and how many;
- SQLAlchemy's session events: from a transaction's start to its connection's BEGIN (waiting
  for the pool, the pre-ping);
- `gc.callbacks`: time in the garbage collector, which holds the GIL and so stops every thread
  of the process, and how many full (generation 2) collections ran meanwhile.
Each process appends one JSON line per request to `<directory>/<pid>.jsonl`.
"""

from __future__ import annotations

import contextvars
import gc
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import fastapi.dependencies.utils
import fastapi.routing
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, SessionTransaction
from starlette.types import ASGIApp, Receive, Scope, Send


@dataclass
class RequestTimes:
    path: str
    at: float  # time.time() at arrival
    total: float = 0.0
    # Sync dependencies, endpoints and response checks each run on the API's few threads
    # (BATON_API_THREADS): the wait for one, and the time run there (SQL included).
    thread_wait: float = 0.0
    in_threads: float = 0.0
    sql: float = 0.0
    statements: int = 0
    connect: float = 0.0  # transaction start to pool checkout (pool wait + pre-ping)
    gc: float = 0.0
    gc_full: int = 0


class GcClock:
    """Seconds spent in the collector so far, and full collections, for this process."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        spent = time.perf_counter() - self._started
        self.seconds += spent
        if info["generation"] == 2:
            self.full += 1


_current: contextvars.ContextVar[RequestTimes | None] = contextvars.ContextVar(
    "breakdown_request", default=None
)


class Breakdown:
    """The ASGI middleware; one per process."""

    def __init__(self, app: ASGIApp, gc_clock: GcClock, out: Path) -> None:
        self.app = app
        self.gc_clock = gc_clock
        self.out = out
        self._lock = threading.Lock()
        self._lines: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        times = RequestTimes(path=scope["path"], at=time.time())
        token = _current.set(times)
        started = time.perf_counter()
        gc_seconds, gc_full = self.gc_clock.seconds, self.gc_clock.full
        try:
            await self.app(scope, receive, send)
        finally:
            _current.reset(token)
            times.total = time.perf_counter() - started
            times.gc = self.gc_clock.seconds - gc_seconds
            times.gc_full = self.gc_clock.full - gc_full
            self._keep(times)

    def _keep(self, times: RequestTimes) -> None:
        with self._lock:
            self._lines.append(json.dumps(asdict(times)))
            # Written in batches: the API is killed, not stopped, at the end of a run.
            if len(self._lines) >= 100:
                with self.out.open("a") as file:
                    file.write("\n".join(self._lines) + "\n")
                self._lines.clear()


def _listen(engine: Engine) -> None:
    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: Any, *args: Any) -> None:
        conn.info["breakdown_started"] = time.perf_counter()

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: Any, *args: Any) -> None:
        times = _current.get()
        if times is not None:
            times.sql += time.perf_counter() - conn.info.pop("breakdown_started")
            times.statements += 1

    @event.listens_for(Session, "after_transaction_create")
    def _begun(session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:
            session.info["breakdown_begun"] = time.perf_counter()

    @event.listens_for(Session, "after_begin")
    def _connected(session: Session, transaction: SessionTransaction, connection: Any) -> None:
        times = _current.get()
        begun = session.info.pop("breakdown_begun", None)
        if times is not None and begun is not None:
            times.connect += time.perf_counter() - begun


def _timed(run_in_threadpool: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        times = _current.get()
        if times is None:
            return await run_in_threadpool(func, *args, **kwargs)
        queued = time.perf_counter()

        def timed() -> Any:
            started = time.perf_counter()
            times.thread_wait += started - queued
            try:
                return func(*args, **kwargs)
            finally:
                times.in_threads += time.perf_counter() - started

        return await run_in_threadpool(timed)

    return run


def install(app: ASGIApp, engine: Engine, directory: Path) -> ASGIApp:
    """`app` wrapped in the breakdown middleware, with the engine's, gc's and FastAPI's thread
    hand-off's hooks set (the last by replacing the name FastAPI calls: a probe, not a seam)."""
    directory.mkdir(parents=True, exist_ok=True)
    clock = GcClock()
    gc.callbacks.append(clock)
    _listen(engine)
    hand_off = "run_in_threadpool"
    for module in (fastapi.routing, fastapi.dependencies.utils):
        setattr(module, hand_off, _timed(getattr(module, hand_off)))
    return Breakdown(app, clock, directory / f"{os.getpid()}.jsonl")


def read_requests(directory: Path) -> list[dict[str, Any]]:
    """Every request the API processes recorded (all but the last <100 of each)."""
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def summarize_requests(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/p99 of each part, and what the slowest 1 % of requests spent their time on."""
    if not requests:
        return {"requests": 0}
    parts = ("total", "thread_wait", "in_threads", "sql", "connect", "gc")

    def at(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    slowest = sorted(requests, key=lambda r: r["total"])[-max(1, len(requests) // 100) :]
    return {
        "requests": len(requests),
        "statements_per_request": round(sum(r["statements"] for r in requests) / len(requests), 2),
        "p50_ms": {part: _ms(at([r[part] for r in requests], 50)) for part in parts},
        "p99_ms": {part: _ms(at([r[part] for r in requests], 99)) for part in parts},
        # The mean of each part over the slowest 1 %: which part makes a request slow.
        "slowest_1pct_mean_ms": {
            part: _ms(sum(r[part] for r in slowest) / len(slowest)) for part in parts
        },
        "full_gc_during_requests": sum(r["gc_full"] for r in requests),
        "requests_with_full_gc": sum(1 for r in requests if r["gc_full"]),
    }


def of_phase(
    requests: list[dict[str, Any]], prefix: str, started_at: float, ended_at: float
) -> list[dict[str, Any]]:
    """The requests of one phase: sent while it ran, to its endpoint."""

    def matches(path: str) -> bool:
        if prefix == "/api/v1/jobs/":
            return path.startswith(prefix)
        return path == prefix

    return [r for r in requests if started_at <= r["at"] <= ended_at and matches(r["path"])]
