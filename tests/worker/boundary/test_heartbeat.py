"""A running session's heartbeat, as the worker writes it and the orchestrator reads it back:
whatever is not a heartbeat reads as none, and it is stalled past the session's own hang bound."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from worker.boundary.contract import WatchdogPolicy
from worker.boundary.heartbeat import Heartbeat, live_metrics

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_a_heartbeat_reads_back_as_it_was_written() -> None:
    beat = Heartbeat(step=12, at=NOW.timestamp(), loss=0.5, step_seconds=2.0)
    assert Heartbeat.from_json(json.loads(json.dumps(beat.to_json()))) == beat
    assert beat.written_at == NOW
    # Before the first measured step there is no loss or step time yet.
    assert Heartbeat.from_json({"step": 0, "at": 1.0}) == Heartbeat(0, 1.0)


def test_a_heartbeat_carries_the_step_s_finite_metrics() -> None:
    carried = live_metrics({"step": 12, "loss": 0.5, "lr": 0.01, "grad_norm": float("nan")})
    assert carried == {"loss": 0.5, "lr": 0.01}
    beat = Heartbeat(step=12, at=NOW.timestamp(), loss=0.5, metrics=carried)
    assert Heartbeat.from_json(json.loads(json.dumps(beat.to_json()))) == beat
    assert live_metrics({"step": 3}) is None
    written = {"step": 1, "at": 1.0, "metrics": {"loss": 1.0, "bad": "x", "inf": float("inf")}}
    assert Heartbeat.from_json(written) == Heartbeat(1, 1.0, metrics={"loss": 1.0})


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {},
        {"step": "12", "at": 1.0},
        {"step": True, "at": 1.0},
        {"step": 12},
        {"step": 12, "at": "now"},
    ],
)
def test_anything_else_reads_as_no_heartbeat(data: object) -> None:
    assert Heartbeat.from_json(data) is None


def test_a_heartbeat_older_than_the_hang_bound_is_stalled() -> None:
    watchdog = WatchdogPolicy(hang_multiple=10.0, hang_floor_seconds=60.0)
    beat = Heartbeat(step=3, at=NOW.timestamp() - 100, step_seconds=9.0)  # bound: 90 s
    assert beat.age(NOW) == 100
    assert beat.stalled(watchdog, NOW)
    assert not Heartbeat(3, NOW.timestamp() - 80, step_seconds=9.0).stalled(watchdog, NOW)
    # Without a measured step time, the floor is the bound.
    assert not Heartbeat(3, NOW.timestamp() - 59).stalled(watchdog, NOW)
    assert not beat.stalled(WatchdogPolicy(hang_floor_seconds=0.0), NOW)  # the watch is off
