"""Routing of reconcile messages, and the dispatch guard on a real (private) Redis."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import select, update

from orchestrator.backends.registry import StaticBackends
from orchestrator.celery_app import SHARED_QUEUE, DispatchGuard, local_queue, make_app, queue_for
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.models import Job, User, utcnow
from orchestrator.spec import JobSpec
from orchestrator.tasks import reconcile_lag
from tests.factories import job_spec, require_services
from tests.scale.cluster import RedisServer
from tests.support.marks import starts_processes


def test_local_jobs_go_to_their_hosts_queue_and_the_rest_to_any_worker() -> None:
    assert queue_for("local", "gpu-box") == local_queue("gpu-box") == "baton.local.gpu-box"
    assert queue_for("kaggle", "gpu-box") == SHARED_QUEUE


def test_the_app_acks_late_prefetches_one_and_keeps_no_results(tmp_path: Path) -> None:
    conf = make_app(Settings(data_dir=tmp_path, beat_interval_seconds=2)).conf
    assert conf.task_acks_late
    assert conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_ignore_result
    fan_out = conf.beat_schedule["fan-out-due-jobs"]
    assert fan_out["schedule"] == 2
    # A stale fan-out is dropped, never run late: the next one supersedes it.
    assert fan_out["options"]["expires"] <= conf.broker_transport_options["visibility_timeout"]


@pytest.fixture
@starts_processes
def redis_client(tmp_path: Path) -> Iterator[redis.Redis]:
    if shutil.which("redis-server") is None:
        if require_services():
            raise FileNotFoundError("redis-server")
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.kill()


@pytest.mark.integration
def test_a_job_is_dispatched_again_only_after_its_task_ran(redis_client: redis.Redis) -> None:
    guard = DispatchGuard(redis_client, seconds=600)
    assert guard.hold(["a", "b"]) == ["a", "b"]
    assert guard.hold(["a", "b", "c"]) == ["c"]  # a and b are still in flight
    guard.release("a")
    assert guard.hold(["a", "b"]) == ["a"]
    # Held keys expire by themselves: a holder that died frees the job.
    assert 0 < redis_client.pttl("baton:due:b") <= 600_000


@pytest.mark.integration
def test_the_beat_health_check_reads_the_last_fan_out(redis_client: redis.Redis) -> None:
    guard = DispatchGuard(redis_client, seconds=30)
    assert guard.last_fan_out() is None
    moment = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    guard.mark_fan_out(moment)
    assert guard.last_fan_out() == moment.timestamp()


def _job(store: Database, next_attempt_at: datetime | None) -> str:
    spec = JobSpec.model_validate(job_spec())
    with store.transaction() as session:
        user = session.scalars(select(User)).first()
        assert user is not None
    job = Engine(store, StaticBackends({}), Path("unused")).submit(user.id, spec)
    with store.transaction() as session:
        session.execute(update(Job).where(Job.id == job.id).values(next_attempt_at=next_attempt_at))
    return job.id


def test_reconcile_lag_counts_from_when_the_job_fell_due(store: Database) -> None:
    late = _job(store, utcnow() - timedelta(seconds=5))
    lag = reconcile_lag(store, late, due_seen_at=None)
    assert lag is not None
    assert 5 <= lag < 600
    # Due since it changed (no next_attempt_at): from when beat's fan-out saw it due.
    fresh = _job(store, None)
    lag = reconcile_lag(store, fresh, due_seen_at=time.time() - 3)
    assert lag is not None
    assert 3 <= lag < 600
    # A nudge after a user's action was never late.
    assert reconcile_lag(store, fresh, due_seen_at=None) is None
