"""How right the ETA is while a chained job runs: 10 simulated jobs, sampled every few seconds.

`python -m benchmarks.eta [--jobs N] [--every S]` plays N chained local-style jobs on a simulated
clock (no processes, no sleeping: it runs in about a second). Each job has its own step time
(0.3-3 s), per-step noise, start-up, load and save costs, a 10 min session limit with the
worker's deadline rule (stop before a step when 1.25 x the slowest recent step + the save + 1 s
would overrun), idle gaps between sessions, and one deliberately slow session (steps 2x and
start-up 3x slower). Every S simulated seconds after the first session ends, it builds the job's
rows as the database would hold them and asks the read layer for the job's ETA
(`orchestrator.queries.job_out`, what the page, the CLI and the API show), then compares it
with the job's true finish.

Figures, over all samples: the median and p90 absolute error of the finish time as a share of
the job's whole duration, the share of samples whose true finish lies inside the shown range
(p10-p90), the range's median width, and the largest jump of the ETA between two samples 30 s
apart. The baseline, run on the same samples, is the rule before issue 20: the latest step time
and the last session's overheads, no deadline margin, no range. Goal (issue 20): after the
first session, median error at most 10 % and the true finish inside the range in at least 80 %
of samples.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.eta import Eta, EtaInputs, estimate_finish
from orchestrator.models import Job, Segment
from orchestrator.queries import LiveProgress, SegmentFacts, job_out, live_progress
from orchestrator.session_timings import SessionTimings

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LIMIT_SECONDS = 600.0
K_STEPS, SAFETY_SECONDS = 1.25, 1.0
EMA_ALPHA = 0.3
GOAL_MEDIAN_ERROR = 0.10
GOAL_COVERAGE = 0.80


@dataclass
class Session:
    index: int
    start_step: int
    launched: float  # simulated seconds since the job's start
    startup: float
    load: float
    save: float
    step_ends: list[float] = field(default_factory=list)  # when each step ended
    step_emas: list[float] = field(default_factory=list)  # the heartbeat's step time then
    ended: float = 0.0

    @property
    def end_step(self) -> int:
        return self.start_step + len(self.step_ends)

    @property
    def train(self) -> float:
        first = self.launched + self.startup + self.load
        return (self.step_ends[-1] - first) if self.step_ends else 0.0


@dataclass
class Played:
    total_steps: int
    sessions: list[Session]

    @property
    def finish(self) -> float:
        return self.sessions[-1].ended


def play_job(seed: int) -> Played:
    """One chained job, session by session, under the worker's deadline rule."""
    rng = random.Random(seed)
    step = rng.uniform(0.3, 3.0)
    usable = LIMIT_SECONDS - 40.0
    total_steps = int(rng.uniform(4.0, 6.0) * usable / step)
    slow = rng.choice([1, 2, 3])
    sessions: list[Session] = []
    clock, done, save_estimate = 0.0, 0, 2.0
    while done < total_steps:
        index = len(sessions)
        factor = 2.0 if index == slow else 1.0
        session = Session(
            index=index,
            start_step=done,
            launched=clock,
            startup=rng.uniform(8.0, 15.0) * (3.0 if index == slow else 1.0),
            load=rng.uniform(2.0, 6.0),
            save=rng.uniform(1.0, 3.0),
        )
        t = session.startup + session.load  # since launch
        recent: list[float] = []
        ema: float | None = None
        while done < total_steps:
            slowest = max(recent[-20:], default=0.0)
            if (
                t + K_STEPS * max(slowest, ema or 0.0) + save_estimate + SAFETY_SECONDS
                > LIMIT_SECONDS
            ):
                break
            took = step * factor * rng.lognormvariate(0.0, 0.08)
            t += took
            done += 1
            recent.append(took)
            ema = took if ema is None else EMA_ALPHA * took + (1 - EMA_ALPHA) * ema
            session.step_ends.append(clock + t)
            session.step_emas.append(ema)
        session.ended = clock + t + session.save
        save_estimate = session.save
        sessions.append(session)
        clock = session.ended + rng.uniform(3.0, 10.0)  # collect, queue, launch
    return Played(total_steps, sessions)


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def rows_at(played: Played, now: float) -> tuple[Job, list[Segment]]:
    """The job and segment rows as the database holds them at `now`."""
    segments: list[Segment] = []
    done = 0
    for session in played.sessions:
        if session.launched > now:
            break
        row = Segment(
            job_id="bench",
            index=session.index,
            start_step=session.start_step,
            limit_seconds=LIMIT_SECONDS,
            launched_at=_at(session.launched),
            launch_spec={},
        )
        if session.ended <= now:
            row.state, row.end_step, row.ended_at = (
                "succeeded",
                session.end_step,
                _at(session.ended),
            )
            row.timings = SessionTimings(
                startup=session.startup,
                load=session.load,
                train=session.train,
                save=session.save,
                upload=0.0,
                step_ema=session.step_emas[-1] if session.step_emas else None,
            ).to_json()
            done = session.end_step
        else:
            row.state = "running"
            steps = sum(1 for end in session.step_ends if end <= now)
            if steps:
                row.progress = {
                    "step": session.start_step + steps,
                    "step_seconds": session.step_emas[steps - 1],
                    "at": _at(session.step_ends[steps - 1]).timestamp(),
                }
        segments.append(row)
    job = Job(
        id="bench",
        user_id="u",
        backend="local",
        name="bench",
        total_steps=played.total_steps,
        steps_done=done,
        failures=0,
        pause_requested=False,
        state="running",
        spec={
            "session": {
                "limit_seconds": LIMIT_SECONDS,
                "margin": {"k_steps": K_STEPS, "safety_seconds": SAFETY_SECONDS},
            }
        },
        created_at=START,
        updated_at=START,
    )
    return job, segments


def previous_eta(job: Job, segments: Sequence[SegmentFacts], now: datetime) -> Eta | None:
    """The rule before issue 20, as the baseline: the live (or last) step time, the last
    session's overheads, no deadline margin, no range."""
    active = next((s for s in segments if s.state == "running"), None)
    progress: LiveProgress | None = live_progress(job, active, now=now)
    measured = [s for s in segments if s.timings and s.end_step is not None]
    timings = (SessionTimings.from_json(measured[-1].timings) if measured else None) or (
        SessionTimings()
    )
    step_seconds = (progress.step_seconds if progress else None) or timings.step_ema
    if not step_seconds:
        return None
    current_left = None
    if active is not None and active.launched_at is not None:
        elapsed = (now - active.launched_at).total_seconds()
        current_left = max(0.0, active.limit_seconds - elapsed - timings.tail)
    ends = [s for s in segments if s.ended_at is not None]
    gaps = [
        (after.launched_at - before.ended_at).total_seconds()
        for before, after in zip(ends, segments[1:], strict=False)
        if after.launched_at is not None and before.ended_at is not None
    ]
    return estimate_finish(
        EtaInputs(
            now=now,
            remaining_steps=job.total_steps - (progress.step if progress else job.steps_done),
            step_seconds=step_seconds,
            session_seconds=LIMIT_SECONDS,
            overhead_seconds=timings.tail + timings.setup,
            idle_seconds=max(0.0, statistics.mean(gaps)) if gaps else 0.0,
            current_session_left=current_left,
        )
    )


@dataclass
class Sample:
    error: float  # (estimated - true finish) / the job's duration
    inside: bool | None  # the true finish within the shown range (None: no range)
    estimate: float  # the estimated finish, simulated seconds
    width: float | None  # the range's width / the job's duration


def current_eta(job: Job, segments: Sequence[Segment], now: datetime) -> Eta | None:
    out = job_out(job, segments, now=now)
    if out.eta is None:
        return None
    return Eta(
        out.eta.finish_at,
        out.eta.more_sessions,
        out.eta.quota_waits,
        None,
        out.eta.earliest,
        out.eta.latest,
    )


Rule = Callable[[Job, Sequence[Segment], datetime], Eta | None]


def sample_job(played: Played, rule: Rule, every: float) -> list[Sample]:
    samples = []
    now = played.sessions[0].ended + every
    while now < played.finish:
        job, segments = rows_at(played, now)
        eta = rule(job, segments, _at(now))
        if eta is not None:
            estimate = (eta.finish_at - START).total_seconds()
            inside, width = None, None
            if eta.earliest is not None and eta.latest is not None:
                inside = eta.earliest <= _at(played.finish) <= eta.latest
                width = (eta.latest - eta.earliest).total_seconds() / played.finish
            error = (estimate - played.finish) / played.finish
            samples.append(Sample(error, inside, estimate, width))
        now += every
    return samples


def summarize(per_job: list[list[Sample]], every: float) -> dict[str, Any]:
    errors = sorted(abs(s.error) for samples in per_job for s in samples)
    ranged = [s.inside for samples in per_job for s in samples if s.inside is not None]
    widths = [s.width for samples in per_job for s in samples if s.width is not None]
    window = max(1, round(30.0 / every))
    jumps = [
        abs(samples[i + window].estimate - samples[i].estimate)
        for samples in per_job
        for i in range(len(samples) - window)
    ]
    return {
        "samples": len(errors),
        "median_error": statistics.median(errors) if errors else None,
        "p90_error": errors[int(0.9 * (len(errors) - 1))] if errors else None,
        "coverage": sum(ranged) / len(ranged) if ranged else None,
        "median_range_width": statistics.median(widths) if widths else None,
        "largest_30s_jump_s": max(jumps, default=0.0),
    }


def run(jobs: int = 10, every: float = 5.0) -> dict[str, Any]:
    played = [play_job(seed) for seed in range(jobs)]
    figures: dict[str, Any] = {
        "jobs": jobs,
        "every_s": every,
        "sessions": [len(p.sessions) for p in played],
        "job_minutes": [round(p.finish / 60, 1) for p in played],
    }
    for name, rule in (("baseline", previous_eta), ("current", current_eta)):
        figures[name] = summarize([sample_job(p, rule, every) for p in played], every)
    return figures


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"ETA over {figures['jobs']} simulated chained jobs ({min(figures['sessions'])}-"
        f"{max(figures['sessions'])} sessions, {min(figures['job_minutes'])}-"
        f"{max(figures['job_minutes'])} min each, one slow session each), sampled every "
        f"{figures['every_s']:g} s after the first session",
        f"{'rule':<10} {'samples':>8} {'median err':>11} {'p90 err':>9} {'in range':>9} "
        f"{'range width':>12} {'max 30 s jump':>14}",
    ]
    for name in ("baseline", "current"):
        row = figures[name]
        lines.append(
            f"{name:<10} {row['samples']:>8} {_share(row['median_error']):>11} "
            f"{_share(row['p90_error']):>9} {_share(row['coverage']):>9} "
            f"{_share(row['median_range_width']):>12} {row['largest_30s_jump_s']:>12.0f} s"
        )
    current = figures["current"]
    met = (
        current["median_error"] is not None
        and current["median_error"] <= GOAL_MEDIAN_ERROR
        and (current["coverage"] or 0.0) >= GOAL_COVERAGE
    )
    lines.append(
        f"goal (median error <= {GOAL_MEDIAN_ERROR:.0%}, true finish in range >= "
        f"{GOAL_COVERAGE:.0%}): {'met' if met else 'NOT met'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--every", type=float, default=5.0, help="simulated seconds per sample")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args.jobs, args.every)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    main()
