"""The read layer's live progress: a heartbeat where one reaches us, an estimate on Kaggle."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from orchestrator import queries
from orchestrator.db import Database
from orchestrator.eta import QuotaPlan
from orchestrator.lifecycle import JobState
from orchestrator.models import Checkpoint, Event, Job, Segment, User
from orchestrator.queries import job_out, live_progress
from tests.factories import FAST_TRAINER, job_spec
from worker.boundary.contract import Estimates, SegmentSpec, WatchdogPolicy
from worker.boundary.transport import REMOTE_FILE

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
    assert (progress.step_seconds, progress.at) == (0.5, NOW)  # the estimate's basis and time
    # At its launch (or launched a moment later by a clock ahead of ours) it is at its start.
    for launched in (NOW, NOW + timedelta(seconds=3)):
        progress = live_progress(_job(), _segment(launched_at=launched), now=NOW)
        assert progress is not None
        assert progress.step == 100


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


def test_a_heartbeat_older_than_the_session_s_own_hang_bound_shows_stalled() -> None:
    """A session sent a 60 s hang floor counts as hung (its watchdog ends it) once its heartbeat
    is older than that; one sent no launch spec runs under the default 600 s. The heartbeat's
    phases and last metrics are shown as it wrote them."""
    watched = asdict(
        SegmentSpec("j1", 2, FAST_TRAINER, {}, 1000, 3600.0, watchdog=WatchdogPolicy(2.0, 60.0))
    )
    beat = {
        "step": 130,
        "step_seconds": 0.5,
        "at": (NOW - timedelta(seconds=120)).timestamp(),
        "phases": {"startup": 3.0, "load": 1.5, "train": 40.0},
        "metrics": {"loss": 0.25, "lr": 0.001},
    }
    shown = live_progress(_job(), _segment(launch_spec=watched, progress=beat), now=NOW)
    assert shown is not None
    assert shown.stalled is True
    assert shown.phases == {"startup": 3.0, "load": 1.5, "train": 40.0}
    assert shown.metrics == {"loss": 0.25, "lr": 0.001}
    unsent = _segment(launch_spec=None, progress=beat)
    assert live_progress(_job(), unsent, now=NOW).stalled is False  # type: ignore[union-attr]
    later = NOW + timedelta(seconds=600)
    assert live_progress(_job(), unsent, now=later).stalled is True  # type: ignore[union-attr]


def test_no_progress_before_launch_or_without_a_measured_step_time() -> None:
    assert live_progress(_job(), None, now=NOW) is None
    assert live_progress(_job(), _segment(launched_at=None), now=NOW) is None
    assert live_progress(_job(), _segment(launch_spec=_launch_spec(None)), now=NOW) is None
    assert live_progress(_job(), _segment(launch_spec=_launch_spec(0.0)), now=NOW) is None
    assert live_progress(_job(), _segment(launch_spec=None), now=NOW) is None


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


def _measured(start_step: int, end_step: int, **fields: object) -> Segment:
    """A committed segment that measured 6 s steps, 40 s of start-up and load and 20 s of save."""
    timings = {"startup": 30.0, "load": 10.0, "train": 6.0 * (end_step - start_step)}
    timings |= {"save": 20.0, "step_ema": 6.0}
    values = {"state": "succeeded", "start_step": start_step, "end_step": end_step, **fields}
    return _segment(timings=timings, **values)


def _third_session_running(step: int, step_seconds: float) -> tuple[Job, list[Segment]]:
    """Steps 0-200 and 200-400 committed at 6 s a step, each hand-over 5 min; the third session
    launched 10 min ago and its heartbeat says `step` at `step_seconds` a step."""
    job = _job("local", steps_done=400)
    segments = [
        _measured(
            0,
            200,
            index=0,
            launched_at=NOW - timedelta(minutes=100),
            ended_at=NOW - timedelta(minutes=60),
        ),
        _measured(
            200,
            400,
            index=1,
            launched_at=NOW - timedelta(minutes=55),
            ended_at=NOW - timedelta(minutes=15),
        ),
        _segment(
            index=2, start_step=400, limit_seconds=3600.0, launched_at=NOW - timedelta(minutes=10)
        ),
    ]
    segments[2].progress = {"step": step, "step_seconds": step_seconds, "at": NOW.timestamp()}
    return job, segments


def test_a_running_session_s_own_pace_plans_its_steps_and_the_typical_pace_the_later_ones() -> None:
    # The third session runs at 12 s a step, twice as slow as the 400 steps before it. Its 2971.5 s
    # left (3600 - 600 elapsed - 20 to save - the margin of 1.25 steps + 1 s at the typical 6 s)
    # hold 247 of its own steps; the other 253 of the 500 to go run at 6 s in one more session,
    # after the 5 min hand-over and 60 s of start-up, load and save.
    job, segments = _third_session_running(step=500, step_seconds=12.0)
    eta = job_out(job, segments, now=NOW).eta
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=4849.5), 1)
    # Once the slow session has trained more steps than all before it, 12 s is the typical step
    # for the sessions to come too: of 1100 steps left, 247 in this one (2964 s left with a 16 s
    # margin), then 293 in each 1 h session (3600 - 60 - 16 = 3524 s): three more sessions.
    job, segments = _third_session_running(step=900, step_seconds=12.0)
    job.total_steps = 2000
    eta = job_out(job, segments, now=NOW).eta
    assert eta is not None
    sessions_to_come = 300 + 3576 + 300 + 3576 + 300 + (60 + 267 * 12)
    assert (eta.finish_at, eta.more_sessions) == (
        NOW + timedelta(seconds=2964 + sessions_to_come),
        3,
    )


def test_the_first_session_s_eta_counts_from_its_heartbeat_alone() -> None:
    # Nothing measured yet but the running session's heartbeat: 6 s steps, no start-up known.
    # Its 2991.5 s left (3600 - 600 elapsed - 1.25 steps - 1 s) hold 498 of the 900 steps to go;
    # the other 402 run in one more session.
    job = _job("local", steps_done=0)
    running = _segment(
        index=0, start_step=0, limit_seconds=3600.0, launched_at=NOW - timedelta(minutes=10)
    )
    running.progress = {"step": 100, "step_seconds": 6.0, "at": NOW.timestamp()}
    eta = job_out(job, [running], now=NOW).eta
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=2991.5 + 402 * 6), 1)


def test_a_session_s_start_up_ends_at_its_first_heartbeat_or_once_earlier_ones_took_as_long() -> (
    None
):
    job, segments = _running_job_with_history()
    job.steps_done = 900
    # Segment 0 took 40 s of start-up and load. A heartbeat 5 s after launch ends the start-up
    # there: the 100 steps left take 600 s from now.
    segments[1].launched_at = NOW - timedelta(seconds=5)
    segments[1].progress = {"step": 900, "step_seconds": 6.0, "at": NOW.timestamp()}
    assert job_out(job, segments, now=NOW).eta.finish_at == NOW + timedelta(seconds=600)  # type: ignore[union-attr]
    # No heartbeat 60 s after launch: the start-up is over anyway, the steps count from now.
    segments[1].launched_at = NOW - timedelta(seconds=60)
    segments[1].progress = None
    assert job_out(job, segments, now=NOW).eta.finish_at == NOW + timedelta(seconds=600)  # type: ignore[union-attr]
    # Launched 5 s ago with 600 steps to go: after the 35 s of start-up left, its 3531.5 s
    # (3600 - 5 - 35 - 20 to save - 8.5 of margin) hold 588; the last 12 run in one more
    # session, after the hand-over segment 0's end and this launch took (895 s).
    job.steps_done = 400
    segments[1].launched_at = NOW - timedelta(seconds=5)
    eta = job_out(job, segments, now=NOW).eta
    assert eta is not None
    assert eta.more_sessions == 1
    assert eta.finish_at == NOW + timedelta(seconds=35 + 3531.5 + 895 + 60 + 12 * 6)


def test_a_session_with_no_time_left_for_a_step_hands_every_step_to_the_next() -> None:
    job, segments = _running_job_with_history()
    job.steps_done = 900
    # Launched 3595 s ago: less than its save and margin left, so the 100 steps still to go run
    # in the next session, after the 305 s hand-over and its 60 s of fixed costs.
    segments[0].launched_at = NOW - timedelta(minutes=130)
    segments[0].ended_at = NOW - timedelta(minutes=65)
    segments[1].launched_at = NOW - timedelta(seconds=3595)
    segments[1].progress = {"step": 900, "step_seconds": 6.0, "at": NOW.timestamp()}
    eta = job_out(job, segments, now=NOW).eta
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=305 + 60 + 600), 1)


def test_a_job_waiting_for_its_quota_finishes_counted_from_the_refresh() -> None:
    # 589 steps to go: one more than a 1 h session holds once the deadline rule's margin (8.5 s)
    # is kept back at its end, so two sessions, the first from the refresh the job waits for.
    refresh = NOW + timedelta(days=2)
    job = _job("kaggle", steps_done=411, state="waiting", wait_until=refresh)
    done = _measured(0, 411, index=0, ended_at=NOW - timedelta(hours=1))
    eta = job_out(job, [done], now=NOW).eta
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (refresh + timedelta(seconds=3588 + 60 + 6), 2)


def test_a_successor_launched_before_its_predecessor_ended_or_never_launched_adds_no_wait() -> None:
    # Segment 1 was pushed by segment 0 itself a minute before that one ended (self-chaining);
    # segment 2's launch was refused, so it never ran. Neither hand-over adds time: the 600
    # steps left run in 588 + 12 back to back, 60 s of fixed costs each.
    job = _job("local", steps_done=400, state="queued")
    segments = [
        _measured(
            0,
            200,
            index=0,
            launched_at=NOW - timedelta(minutes=100),
            ended_at=NOW - timedelta(minutes=60),
        ),
        _measured(
            200,
            400,
            index=1,
            launched_at=NOW - timedelta(minutes=61),
            ended_at=NOW - timedelta(minutes=20),
        ),
        _segment(
            index=2,
            state="failed",
            start_step=400,
            launched_at=None,
            ended_at=NOW - timedelta(minutes=19),
        ),
    ]
    eta = job_out(job, segments, now=NOW).eta
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=3588 + 132), 2)


def test_a_job_of_steps_under_a_second_has_an_eta() -> None:
    job = _job("local", steps_done=400, state="queued")
    done = _segment(
        index=0,
        state="succeeded",
        start_step=0,
        end_step=400,
        ended_at=NOW - timedelta(minutes=5),
        timings={"startup": 30.0, "load": 10.0, "save": 20.0, "train": 200.0, "step_ema": 0.5},
    )
    eta = job_out(job, [done], now=NOW).eta
    assert eta is not None
    # 600 steps of 0.5 s after 60 s of start-up, load and save.
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=360), 1)


# The reads by job, against a database: two users, three jobs, each with segments, events,
# metrics and checkpoints of its own, written in an order that is not the order they are read in.
USERS = {"alice": ["a1", "a2", "a3"], "bob": ["b1"]}
STATES = {"a1": "running", "a2": "succeeded", "a3": "succeeded", "b1": "running"}


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _loss(job_id: str, step: int) -> float:
    """Each job's own loss curve."""
    return step + 0.5 * int(job_id[1:]) + (100.0 if job_id.startswith("b") else 0.0)


def _stored_jobs(db: Database, root: Path) -> None:
    """Each job: segments 1 then 0 (0 ended at step 20, 1 at 40), a failed segment 2 that
    trained past 40, an event per segment, and checkpoints at steps 40, 10, 30, 20 of which 10's
    files are pruned, 20 is rejected (its files still there, a remote stub among them), 30 lies
    on Kaggle (a stub) and 40 is here."""
    with db.transaction() as session:
        for order, (user, jobs) in enumerate(USERS.items()):
            session.add(User(id=user, name=user))
            session.flush()
            for number, job_id in enumerate(jobs):
                created = NOW + timedelta(minutes=10 * order + number)
                session.add(
                    Job(
                        id=job_id,
                        user_id=user,
                        name="train",  # every job the same name
                        backend="local",
                        state=STATES[job_id],
                        spec=job_spec(total_steps=100),
                        total_steps=100,
                        steps_done=40,
                        created_at=created,
                        updated_at=created,
                    )
                )
                session.flush()
                ends = {1: (20, 40), 0: (0, 20), 2: (40, None)}
                for index, (start, end) in ends.items():
                    session.add(
                        Segment(
                            job_id=job_id,
                            index=index,
                            state="failed" if end is None else "succeeded",
                            launch_id=f"{job_id}-{index}",
                            start_step=start,
                            end_step=end,
                            limit_seconds=60.0,
                            launch_spec={},
                            error=f"{job_id} segment {index}",
                            # The step a segment resumed from is reported again; steps past
                            # its end only by the failed one.
                            metrics=[
                                {"step": step, "loss": _loss(job_id, step)}
                                for step in range(start, (end or 60) + 1, 10)
                            ],
                        )
                    )
                    session.add(
                        Event(
                            job_id=job_id,
                            segment_index=index,
                            kind="segment_state",
                            message=f"{job_id} event {index}",
                        )
                    )
                for index, step in [(3, 40), (0, 10), (2, 30), (1, 20)]:
                    location = root / job_id / str(step)
                    if step != 10:
                        location.mkdir(parents=True)
                    if step in (20, 30):
                        (location / REMOTE_FILE).write_text("{}")
                    session.add(
                        Checkpoint(
                            job_id=job_id,
                            segment_index=index,
                            step=step,
                            location=str(location),
                            model_digest=f"{job_id}-{step}",
                            bytes=step,
                            manifest={"job_id": job_id, "step": step},
                            rejected="damaged" if step == 20 else None,
                        )
                    )


def test_every_read_of_a_job_answers_about_that_job_alone_and_only_to_its_owner(
    db: Database, tmp_path: Path
) -> None:
    _stored_jobs(db, tmp_path)
    with db.transaction() as session:
        for user, jobs in USERS.items():
            for job_id in jobs:
                segments = queries.list_segments(session, user, job_id)
                assert [(s.index, s.error) for s in segments] == [
                    (i, f"{job_id} segment {i}") for i in range(3)
                ]
                # Each segment shows the checkpoint its own job committed at its index.
                assert [s.checkpoint for s in segments] == [
                    {"job_id": job_id, "step": step} for step in (10, 20, 30)
                ]
                for index in range(3):
                    found = queries.find_segment(session, user, job_id, index)
                    assert found is not None
                    assert found.error == f"{job_id} segment {index}"
                events = queries.list_events(session, user, job_id)
                assert [e.message for e in events] == [f"{job_id} event {i}" for i in (1, 0, 2)]
                later = queries.list_events(session, user, job_id, after=events[0].id)
                assert [e.message for e in later] == [f"{job_id} event {i}" for i in (0, 2)]
                listed = queries.list_checkpoints(session, user, job_id, include_pruned=True)
                assert [c.model_digest for c in listed] == [
                    f"{job_id}-{s}" for s in (10, 20, 30, 40)
                ]
                latest = queries.find_checkpoint(session, user, job_id)
                assert latest is not None
                assert latest.model_digest == f"{job_id}-40"
                at_20 = queries.find_checkpoint(session, user, job_id, 20)
                assert at_20 is not None
                assert at_20.model_digest == f"{job_id}-20"
                assert queries.find_checkpoint(session, user, job_id, 25) is None
                metrics = queries.list_metrics(session, user, job_id)
                # One point per committed step: the step a segment resumed from is its
                # predecessor's, and the failed segment's steps never count.
                assert [(p.segment_index, p.step, p.values) for p in metrics] == [
                    (index, step, {"loss": _loss(job_id, step)})
                    for index, step in [(0, 10), (0, 20), (1, 30), (1, 40)]
                ]
                # Nobody else gets anything of it: the job is not there for them.
                stranger = "bob" if user == "alice" else "alice"
                reads = [
                    partial(queries.list_segments, session, stranger, job_id),
                    partial(queries.find_segment, session, stranger, job_id, 0),
                    partial(queries.list_events, session, stranger, job_id),
                    partial(queries.list_metrics, session, stranger, job_id),
                    partial(queries.list_checkpoints, session, stranger, job_id),
                    partial(queries.find_checkpoint, session, stranger, job_id),
                    partial(queries.get_job, session, stranger, job_id),
                ]
                for read in reads:
                    with pytest.raises(queries.JobNotVisible) as refused:
                        read()
                    assert refused.value.job_id == job_id  # "job <id> not found"


def test_the_checkpoint_listing_shows_what_can_be_downloaded_and_says_which_are_kept(
    db: Database, tmp_path: Path
) -> None:
    _stored_jobs(db, tmp_path)
    with db.transaction() as session:
        shown = queries.list_checkpoints(session, "alice", "a2")
        assert [(c.step, c.kept, c.on_kaggle) for c in shown] == [
            (30, True, True),
            (40, True, False),
        ]
        every = queries.list_checkpoints(session, "alice", "a2", include_pruned=True)
        # The pruned one and the rejected one are listed as not kept, never as on Kaggle.
        assert [(c.step, c.kept, c.on_kaggle) for c in every] == [
            (10, False, False),
            (20, False, False),
            (30, True, True),
            (40, True, False),
        ]


def test_the_job_list_counts_and_pages_only_the_users_own_jobs(
    db: Database, tmp_path: Path
) -> None:
    _stored_jobs(db, tmp_path)
    with db.transaction() as session:
        page = queries.list_jobs(session, "alice", now=NOW)
        # Newest first, each job once however many segments it has.
        assert [item.id for item in page.items] == ["a3", "a2", "a1"]
        assert page.total == 3
        # A full page's cursor is its last job: the next page goes on right after it.
        first = queries.list_jobs(session, "alice", limit=3)
        assert first.next_cursor == "a1"
        assert queries.list_jobs(session, "alice", after=first.next_cursor).items == []
        # A page past the end still counts the user's own jobs only, in the state asked for.
        assert queries.list_jobs(session, "alice", offset=5).total == 3
        assert queries.list_jobs(session, "bob", offset=5).total == 1
        done = queries.list_jobs(session, "alice", state=JobState.SUCCEEDED, offset=5)
        assert (done.items, done.total) == ([], 2)
        assert queries.list_jobs(session, "carol", offset=5).total == 0


def _stored_running_job(session: Session, job_id: str, backend: str, created: datetime) -> None:
    """A job of alice's with its own margin (2 steps + 0.5 s): steps 0-400 committed at 6 s a
    step (60 s of start-up, load and save) and ended 15 min ago; the next session launched 10 min
    ago and its heartbeat says step 500."""
    margin = {"k_steps": 2.0, "safety_seconds": 0.5}
    spec = job_spec(
        backend=backend, total_steps=1000, session={"limit_seconds": 3600.0, "margin": margin}
    )
    session.add(
        Job(
            id=job_id,
            user_id="alice",
            name=job_id,
            backend=backend,
            state="running",
            spec=spec,
            total_steps=1000,
            steps_done=400,
            created_at=created,
            updated_at=created,
        )
    )
    session.flush()
    timings = {"startup": 30.0, "load": 10.0, "train": 2400.0, "save": 20.0, "step_ema": 6.0}
    common = {"job_id": job_id, "limit_seconds": 3600.0, "launch_spec": _launch_spec(0.5)}
    session.add(
        Segment(
            index=0,
            state="succeeded",
            launch_id=f"{job_id}-0",
            start_step=0,
            end_step=400,
            timings=timings,
            launched_at=NOW - timedelta(minutes=80),
            ended_at=NOW - timedelta(minutes=15),
            **common,
        )
    )
    session.add(
        Segment(
            index=1,
            state="running",
            launch_id=f"{job_id}-1",
            start_step=400,
            progress={"step": 500, "loss": 0.5, "step_seconds": 6.0, "at": NOW.timestamp()},
            launched_at=NOW - timedelta(minutes=10),
            **common,
        )
    )


def test_the_list_and_the_job_show_the_eta_of_the_job_s_own_session_rule_and_its_backend_s_quota(
    db: Database,
) -> None:
    with db.transaction() as session:
        session.add(User(id="alice", name="alice"))
        session.flush()
        _stored_running_job(session, "kaggle-job", "kaggle", NOW)
        _stored_running_job(session, "local-job", "local", NOW + timedelta(minutes=1))
    # The Kaggle quota is spent until the refresh in 2 days; local sessions use none.
    refresh = NOW + timedelta(days=2)
    quota = QuotaPlan(seconds_left=0, refresh_at=refresh, allowance_seconds=30 * 3600)
    with db.transaction() as session:
        listed = queries.list_jobs(session, "alice", now=NOW, kaggle_quota=quota).items
        shown = {
            job_id: queries.get_job(session, "alice", job_id, now=NOW, kaggle_quota=quota)
            for job_id in ("local-job", "kaggle-job")
        }
    assert [item.id for item in listed] == ["local-job", "kaggle-job"]
    for item in listed:
        job = shown[item.id]
        assert item.progress == job.progress
        assert item.eta == job.eta
        assert job.progress is not None
        assert (job.progress.segment_index, job.progress.step, job.progress.estimated) == (
            1,
            500,
            False,
        )
    # The running session's 2967.5 s left (3600 - 600 elapsed - 20 s to save - the job's margin,
    # 2 steps + 0.5 s) hold 494 of the 500 steps to go; the last 6 run in one more session after
    # the 5 min hand-over: 60 s of fixed costs and 36 s of steps.
    local = shown["local-job"].eta
    assert local is not None
    assert (local.finish_at, local.more_sessions, local.quota_waits) == (
        NOW + timedelta(seconds=2967.5 + 300 + 96),
        1,
        0,
    )
    assert local.text.startswith("done in 56 min")
    # The Kaggle job's last session waits for the refresh.
    on_kaggle = shown["kaggle-job"].eta
    assert on_kaggle is not None
    assert (on_kaggle.finish_at, on_kaggle.more_sessions, on_kaggle.quota_waits) == (
        refresh + timedelta(seconds=96),
        1,
        1,
    )
    assert "at 30 h/week" in on_kaggle.text
    # Read without a clock (as the API reads), the ETA counts from the current UTC time; each
    # segment shows what its session measured.
    with db.transaction() as session:
        today = queries.get_job(session, "alice", "local-job").eta
        measured = queries.list_segments(session, "alice", "local-job")[0].timings
    assert measured is not None
    assert (measured.startup, measured.train, measured.save, measured.step_ema) == (
        30.0,
        2400.0,
        20.0,
        6.0,
    )
    assert today is not None
    assert today.finish_at > datetime.now(UTC)
