"""One user's hostile webhooks cannot hold up anyone else's notifications or jobs, and cannot
keep `baton serve` from stopping: a receiver answering garbage, one dripping its answer one
byte every 5 s and 20 that never answer, all on loopback (allowed by the operator's setting)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.auth import issue_token
from orchestrator.db import Database
from orchestrator.service import prestart
from tests.factories import ADMIN_TOKEN, make_settings
from tests.support.hostile_receivers import (
    HostileReceivers,
    hostile_urls,
    submit_hooked_jobs,
    victim_is_served,
    wait_until,
)
from tests.support.serve import baton_serve
from tests.support.webhook_receiver import Receiver

LOOPBACK = "127.0.0.0/8"
STOPPED_WITHIN = 10.0


@pytest.fixture
def hostile() -> Iterator[HostileReceivers]:
    receivers = HostileReceivers(drip_seconds=5.0)
    yield receivers
    receivers.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.start()
    yield running
    running.close()


def _clients(url: str, bob_token: str) -> tuple[httpx.Client, httpx.Client]:
    return (
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30),
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {bob_token}"}, timeout=30),
    )


def test_hostile_webhooks_hold_up_no_one_else_and_serve_stops_in_time(
    tmp_path: Path, database_url: str, hostile: HostileReceivers, receiver: Receiver
) -> None:
    settings = make_settings(
        tmp_path / "data", database_url=database_url, webhook_allowed_networks=LOOPBACK
    )
    prestart(settings)
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        bob_token = issue_token(session, "bob")
    db.dispose()
    log = tmp_path / "serve.log"
    with baton_serve(
        settings,
        log,
        BATON_WEBHOOK_ALLOWED_NETWORKS=LOOPBACK,
        BATON_NOTIFY_INTERVAL_SECONDS="0.2",
        BATON_RECONCILE_INTERVAL_SECONDS="0.2",
        BATON_LOCAL_SLOTS="2",
    ) as (url, server):
        attacker, victim = _clients(url, bob_token)
        with attacker, victim:
            figures = victim_is_served(attacker, victim, hostile, receiver)
            # Stop while POSTs are in flight: the drip is being read, hanging ones wait.
            submit_hooked_jobs(attacker, hostile_urls(hostile), "again")
            wait_until(lambda: hostile.drip_hits > 1, "a second drip in flight", 60)
        server.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        server.wait(timeout=60)
        figures["stopped"] = time.monotonic() - stopping
    print(f"figures (s): {figures}")
    assert figures["stopped"] < STOPPED_WITHIN, log.read_text()[-3000:]
    text = log.read_text()
    assert "secret" not in text  # no webhook path in the server's log
    assert "Traceback" not in text
