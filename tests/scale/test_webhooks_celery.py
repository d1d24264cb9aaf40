"""In Celery mode, webhook deliveries run on their own queue and worker: hostile receivers (a
garbage answer, a 1 byte / 5 s drip, 20 that never answer) hold up neither another user's
notification nor the engine's workers, so another user's job is still admitted at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.auth import issue_token
from orchestrator.db import Database
from tests.factories import ADMIN_TOKEN
from tests.scale.cluster import Cluster, started_rig
from tests.support.hostile_receivers import HostileReceivers, victim_is_served
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """API, two engine workers, a notifications worker and beat, on PostgreSQL and Redis."""
    with started_rig(
        tmp_path,
        {},
        notifier=True,
        BATON_RECONCILE_INTERVAL_SECONDS="0.3",
        BATON_BEAT_INTERVAL_SECONDS="0.5",
        BATON_NOTIFY_INTERVAL_SECONDS="0.5",
        BATON_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        BATON_LOCAL_SLOTS="2",
    ) as rig:
        yield rig.cluster


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
