"""A private Redis, a fresh PostgreSQL schema, the Kaggle emulator and a Baton cluster on them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tests.factories import require_services, stop_sessions
from tests.kaggle_emulator import Emulator, start_emulator
from tests.scale.cluster import Cluster, RedisServer, postgres_schema
from tests.support.marks import starts_processes


@dataclass
class ScaleRig:
    cluster: Cluster
    redis: RedisServer
    emulator: Emulator
    database_url: str


@pytest.fixture
@starts_processes
def rig(tmp_path: Path) -> Iterator[ScaleRig]:
    """Started: API, two workers and beat, on their own Redis and PostgreSQL schema."""
    if shutil.which("redis-server") is None:
        if require_services():
            raise FileNotFoundError("redis-server is required (BATON_REQUIRE_SERVICES=1)")
        pytest.skip("redis-server not installed")
    with ExitStack() as stack:
        try:
            database_url = stack.enter_context(postgres_schema())
        except OperationalError as exc:
            if require_services():
                raise
            pytest.skip(f"PostgreSQL not reachable: {exc}")
        emulator = stack.enter_context(
            start_emulator(
                tmp_path / "kaggle",
                queue_seconds=0.2,
                dataset_processing_seconds=0.5,
                dataset_not_found_seconds=0.3,
            )
        )
        redis = RedisServer(tmp_path / "redis")
        stack.callback(redis.kill)
        redis.start()
        cluster = Cluster(
            tmp_path / "cluster",
            database_url,
            redis.url,
            emulator.url,
            BATON_RECONCILE_INTERVAL_SECONDS="0.3",
            BATON_BEAT_INTERVAL_SECONDS="0.5",
            BATON_KAGGLE_POLL_SECONDS="0.5",
            BATON_CLAIM_LEASE_SECONDS="4",
            BATON_DISPATCH_GUARD_SECONDS="4",
        )
        stack.callback(stop_sessions, cluster.root / "data" / "sessions")
        stack.callback(cluster.stop_all)
        cluster.start_all()
        yield ScaleRig(cluster, redis, emulator, database_url)
