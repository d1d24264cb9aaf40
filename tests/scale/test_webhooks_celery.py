"""In Celery mode, webhook deliveries run on their own queue and worker: hostile receivers (a
garbage answer, a 1 byte / 5 s drip, 20 that never answer) hold up neither another user's
notification nor the engine's workers, so another user's job is still admitted at once."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from orchestrator.auth import issue_token
from orchestrator.db import Database
from tests.factories import ADMIN_TOKEN, require_services, stop_sessions
from tests.kaggle_emulator import start_emulator
from tests.scale.cluster import Cluster, RedisServer, postgres_schema
from tests.support.hostile_receivers import HostileReceivers, victim_is_served
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """API, two engine workers, a notifications worker and beat, on PostgreSQL and Redis."""
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
        emulator = stack.enter_context(start_emulator(tmp_path / "kaggle"))
        redis = RedisServer(tmp_path / "redis")
        stack.callback(redis.kill)
        redis.start()
        running = Cluster(
            tmp_path / "cluster",
            database_url,
            redis.url,
            emulator.url,
            notifier=True,
            BATON_RECONCILE_INTERVAL_SECONDS="0.3",
            BATON_BEAT_INTERVAL_SECONDS="0.5",
            BATON_NOTIFY_INTERVAL_SECONDS="0.5",
            BATON_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
            BATON_LOCAL_SLOTS="2",
        )
        stack.callback(stop_sessions, running.root / "data" / "sessions")
        stack.callback(running.stop_all)
        running.start_all()
        yield running


def test_hostile_webhooks_hold_up_no_one_else_with_celery(cluster: Cluster, tmp_path: Path) -> None:
    db = Database(cluster.env["BATON_DATABASE_URL"])
    with db.transaction() as session:
        bob_token = issue_token(session, "bob")
    db.dispose()
    hostile = HostileReceivers(drip_seconds=5.0)
    receiver = Receiver()
    receiver.start()
    url = cluster.api_url
    try:
        with (
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as a,
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {bob_token}"}) as b,
        ):
            figures = victim_is_served(a, b, hostile, receiver)
    except AssertionError:
        print(cluster.log_tail())
        raise
    finally:
        hostile.close()
        receiver.close()
    print(f"figures (s): {figures}")
    assert "secret" not in cluster.log_tail(100_000)  # no webhook path in any process's log
