"""The read layer's live progress: a heartbeat where one reaches us, an estimate on Kaggle."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from orchestrator.eta import QuotaPlan
from orchestrator.models import Job, Segment
from orchestrator.queries import job_out, live_progress
from tests.factories import FAST_TRAINER, job_spec
from worker.boundary.contract import Estimates, SegmentSpec

NOW = datetime(2026, 11, 19, 8, 0, tzinfo=UTC)


def _job(backend: str = "kaggle", **fields: object) -> Job:
    """A job of 1000 steps in 1 h sessions, running unless told otherwise."""
    spec = job_spec(backend=backend, total_steps=1000, session={"limit_seconds": 3600.0})
    values: dict[str, object] = {
        "name": "j",
        "steps_done": 0,
        "failures": 0,
        "pause_requested": False,
        "state": "running",
        "created_at": NOW,
        "updated_at": NOW,
        **fields,
    }
    return Job(id="j1", user_id="u1", backend=backend, total_steps=1000, spec=spec, **values)


def _launch_spec(step_seconds: float | None) -> dict[str, object]:
    """The SegmentSpec a session was sent, with what earlier segments measured per step."""
    estimates = Estimates(step_seconds=step_seconds)
    return asdict(SegmentSpec("j1", 2, FAST_TRAINER, {}, 1000, 3600.0, estimates=estimates))


def _segment(**fields: object) -> Segment:
    values: dict[str, object] = {
        "job_id": "j1",
        "index": 2,
        "state": "running",
        "start_step": 100,
        "launched_at": NOW - timedelta(seconds=50),
        "launch_spec": _launch_spec(0.5),
    }
    values.update(fields)
    return Segment(**values)


def test_a_heartbeat_is_shown_as_measured() -> None:
    segment = _segment()
    segment.progress = {"step": 130, "loss": 0.25, "step_seconds": 0.4, "at": NOW.timestamp()}
    progress = live_progress(_job(), segment, now=NOW)
    assert progress is not None
    assert (progress.step, progress.loss, progress.step_seconds) == (130, 0.25, 0.4)
    assert progress.at == NOW
    assert progress.estimated is False


def test_without_a_heartbeat_the_step_is_estimated_from_elapsed_time() -> None:
    progress = live_progress(_job(), _segment(), now=NOW)
    assert progress is not None
    # 50 s at the 0.5 s the earlier segments measured: 100 steps past the segment's start.
    assert (progress.step, progress.estimated, progress.loss) == (200, True, None)


def test_an_estimate_never_passes_the_total() -> None:
    progress = live_progress(_job(), _segment(start_step=990), now=NOW)
    assert progress is not None
    assert progress.step == 1000


def test_a_local_session_without_a_heartbeat_yet_shows_no_guess() -> None:
    assert live_progress(_job("local"), _segment(), now=NOW) is None
    segment = _segment()
    segment.progress = {"step": 101, "loss": 1.0, "step_seconds": 0.5, "at": NOW.timestamp()}
    progress = live_progress(_job("local"), segment, now=NOW)
    assert progress is not None
    assert (progress.step, progress.estimated) == (101, False)


def test_no_progress_before_launch_or_without_a_measured_step_time() -> None:
    assert live_progress(_job(), None, now=NOW) is None
    assert live_progress(_job(), _segment(launched_at=None), now=NOW) is None
    assert live_progress(_job(), _segment(launch_spec=_launch_spec(None)), now=NOW) is None


def test_a_kaggle_job_s_eta_counts_the_quota_and_its_refresh() -> None:
    job = _job("kaggle", steps_done=400, state="queued")
    done = _segment(
        state="succeeded",
        start_step=0,
        end_step=400,
        ended_at=NOW - timedelta(minutes=5),
        timings={"startup": 30.0, "load": 10.0, "save": 20.0, "step_ema": 6.0},
    )
    refresh = NOW + timedelta(days=2)
    quota = QuotaPlan(seconds_left=0, refresh_at=refresh, allowance_seconds=30 * 3600)
    out = job_out(job, [done], now=NOW, quota=quota)
    assert out.eta is not None
    # 600 steps of 6 s after 60 s of overhead per session: 1 h sessions hold 590 steps.
    assert out.eta.quota_waits == 1
    assert out.eta.more_sessions == 2
    assert out.eta.finish_at == refresh + timedelta(hours=1, seconds=60 + 10 * 6)
    assert "at 30 h/week" in out.eta.text
    assert job_out(job, [done], now=NOW).eta.quota_waits == 0  # type: ignore[union-attr]


def _running_job_with_history() -> tuple[Job, list[Segment]]:
    """Segment 0 committed step 400 (6 s steps, 60 s outside steps, 20 s of it after the last
    step) and ended 15 min ago; segment 1 launched 10 min ago with a 1 h limit and runs."""
    job = _job("local", steps_done=400)
    done = _segment(
        index=0,
        state="succeeded",
        start_step=0,
        end_step=400,
        launched_at=NOW - timedelta(minutes=80),
        ended_at=NOW - timedelta(minutes=15),
        timings={"startup": 30.0, "load": 10.0, "save": 20.0, "step_ema": 6.0},
    )
    running = _segment(
        index=1,
        start_step=400,
        limit_seconds=3600.0,
        launched_at=NOW - timedelta(minutes=10),
    )
    return job, [done, running]


def test_a_running_job_s_eta_counts_from_its_live_step_and_the_time_its_session_has_left() -> None:
    job, segments = _running_job_with_history()
    # At step 800 the running session's 2971.5 s left (3600 - 600 elapsed - 20 s to save - the
    # deadline rule's margin, 1.25 steps + 1 s) hold the 200 steps still to go: done 1200 s from
    # now, no more sessions.
    segments[1].progress = {"step": 800, "step_seconds": 6.0, "at": NOW.timestamp()}
    out = job_out(job, segments, now=NOW)
    assert out.eta is not None
    assert (out.eta.finish_at, out.eta.more_sessions) == (NOW + timedelta(seconds=1200), 0)
    # At step 500 they hold 495 of the 500 to go: the last 5 run in one more session, launched
    # after the 5 min the previous hand-over took, 60 s overhead + 5 steps after it starts.
    segments[1].progress = {"step": 500, "step_seconds": 6.0, "at": NOW.timestamp()}
    out = job_out(job, segments, now=NOW)
    assert out.eta is not None
    assert out.eta.more_sessions == 1
    assert out.eta.finish_at == NOW + timedelta(seconds=2971.5 + 300 + 60 + 5 * 6)
    assert out.eta.earliest is not None
    assert out.eta.latest is not None
    assert out.eta.earliest < out.eta.finish_at < out.eta.latest


def test_a_session_still_starting_trains_only_after_the_start_up_earlier_sessions_took() -> None:
    job, segments = _running_job_with_history()
    job.steps_done = 900
    # Launched 5 s ago, no heartbeat yet: the 40 s of start-up and load segment 0 took are 35 s
    # from over, then the 100 steps left take 600 s.
    segments[1].launched_at = NOW - timedelta(seconds=5)
    out = job_out(job, segments, now=NOW)
    assert out.eta is not None
    assert (out.eta.finish_at, out.eta.more_sessions) == (NOW + timedelta(seconds=635), 0)
