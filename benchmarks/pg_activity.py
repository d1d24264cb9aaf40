"""What PostgreSQL did during a load run: its sessions' wait events and its checkpoints.

A thread samples `pg_stat_activity` (the benchmark's active sessions and what each waits on)
every 50 ms and `pg_stat_bgwriter` (checkpoints and their write and sync time) every 0.5 s,
stamped with time.time(), so that each benchmark phase can be matched with what happened.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from sqlalchemy import create_engine, text

# The benchmark's processes connect under this name: other clients of the server are not counted.
APPLICATION_NAME = "baton_load"
_ACTIVITY = text(
    "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, 'running') "
    "FROM pg_stat_activity WHERE application_name = :name AND state = 'active' "
    "AND pid <> pg_backend_pid()"
).bindparams(name=APPLICATION_NAME)
_CHECKPOINTS = text(
    "SELECT checkpoints_timed + checkpoints_req, checkpoint_write_time, checkpoint_sync_time, "
    "buffers_checkpoint FROM pg_stat_bgwriter"
)


class PgSampler:
    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url, pool_size=1)
        self.waits: list[tuple[float, list[str]]] = []
        self.checkpoints: list[tuple[float, tuple[float, ...]]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.engine.dispose()

    def _run(self) -> None:
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            tick = 0
            while not self._done.wait(0.05):
                now = time.time()
                self.waits.append((now, list(conn.scalars(_ACTIVITY))))
                if tick % 10 == 0:
                    row = conn.execute(_CHECKPOINTS).one()
                    self.checkpoints.append((now, tuple(float(value) for value in row)))
                tick += 1

    def during(self, started_at: float, ended_at: float) -> dict[str, Any]:
        """Wait events (samples of active sessions) and checkpoints between the two times."""
        samples = [waits for at, waits in self.waits if started_at <= at <= ended_at]
        counted = Counter(wait for waits in samples for wait in waits)
        inside = [row for at, row in self.checkpoints if started_at <= at <= ended_at]
        before = [row for at, row in self.checkpoints if at < started_at][-1:]
        after = [row for at, row in self.checkpoints if at > ended_at][:1]
        bounds = (before or inside[:1]) + (after or inside[-1:])
        first, last = (bounds[0], bounds[-1]) if bounds else ((0.0,) * 4, (0.0,) * 4)
        return {
            "samples": len(samples),
            "active_sessions_mean": round(sum(map(len, samples)) / max(1, len(samples)), 2),
            "wait_events": dict(counted.most_common(6)),
            "checkpoints": int(last[0] - first[0]),
            "checkpoint_write_ms": last[1] - first[1],
            "checkpoint_sync_ms": last[2] - first[2],
            "checkpoint_buffers": int(last[3] - first[3]),
        }
