"""Where session time went: per phase, in total, and the share trained."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.quota_use import quota_use
from orchestrator.session_timings import SessionTimings
from orchestrator.wire import LiveProgress, SegmentOut

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _segment(index: int, timings: SessionTimings | None, launched_ago: float) -> SegmentOut:
    return SegmentOut(
        index=index,
        state="succeeded" if timings else "running",
        outcome=None,
        start_step=0,
        end_step=None,
        limit_seconds=120.0,
        timings=timings,
        error=None,
        checkpoint=None,
        created_at=NOW,
        launched_at=NOW - timedelta(seconds=launched_ago),
        ended_at=None,
    )


def test_phases_add_up_per_session_and_the_rest_is_idle() -> None:
    done = SessionTimings(startup=20, load=60, train=15, save=5, upload=0, session=103)
    use = quota_use([_segment(0, done, 500), _segment(1, None, 30)], NOW)
    assert use.phases["load"] == 60
    assert use.phases["idle"] == pytest.approx(3)
    # A session still under way is "running" until it reports its phases, not "train".
    assert use.phases["running"] == pytest.approx(30)
    assert use.total == pytest.approx(133)
    assert use.sessions == 2
    assert use.trained_share == pytest.approx(15 / 133)
    assert use.describe().startswith("133 s in 2 sessions: startup 20 s (15 %), load 60 s (45 %)")
    assert use.describe().endswith("11 % of session time trained")


def test_no_session_yet() -> None:
    use = quota_use([], NOW)
    assert use.trained_share is None
    assert use.describe() == "no session time used yet"


def test_a_running_session_is_drawn_by_the_phases_its_heartbeat_reported() -> None:
    live = LiveProgress(
        segment_index=1,
        step=40,
        loss=None,
        step_seconds=0.5,
        at=NOW,
        estimated=False,
        phases={"startup": 12.0, "load": 8.0, "train": 6.0},
    )
    use = quota_use([_segment(1, None, 30)], NOW, live)
    assert {k: v for k, v in use.phases.items() if v} == pytest.approx(
        {"startup": 12.0, "load": 8.0, "train": 6.0, "running": 4.0}
    )
    # Another segment's heartbeat says nothing about this one.
    other = live.model_copy(update={"segment_index": 0})
    assert quota_use([_segment(1, None, 30)], NOW, other).phases["running"] == pytest.approx(30)
