"""When a job will finish: pure arithmetic over step time, sessions, overheads and quota.

The inputs are measured, not taken from the latest reading alone: the running session goes on
at its own live step time, sessions to come at the sessions' median step time (weighted by
their steps: one slow session or a 1-step one does not move it), a session's fixed cost is the
median of the earlier ones' (one slow start-up does not move it), and each session keeps the
deadline rule's margin (worker/deadline.py) unused. The range (p10-p90) comes from the spread of
the sessions' step times plus a prior that shrinks as sessions accumulate
(benchmarks/eta.py measures how often the finish falls inside it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

QUOTA_PERIOD = timedelta(days=7)
# A plan that needs more sessions than this is no plan: the estimate says so instead.
MAX_SESSIONS = 10_000
# How unsure the remaining time is before any session has finished (one standard deviation, as
# a fraction); divided by sqrt(1 + finished sessions) as they accumulate.
PRIOR_SPREAD = 0.2
# The p10-p90 range of a normal spread: +-1.28 standard deviations.
Z_P90 = 1.2816
# Past this, the ETA names its finish as a time of day; before it, as a duration.
SHORT_JOB = timedelta(hours=1)


@dataclass(frozen=True)
class QuotaPlan:
    """Accelerator time: what is left now, when it refreshes, and what each refresh grants."""

    seconds_left: float
    refresh_at: datetime | None
    allowance_seconds: float  # granted at each refresh (Kaggle GPU: 30 h a week)
    period: timedelta = QUOTA_PERIOD


@dataclass(frozen=True)
class EtaInputs:
    now: datetime
    remaining_steps: int
    step_seconds: float
    session_seconds: float  # the hard limit of one session
    # Time a session spends outside training steps: start-up, load, save, upload.
    overhead_seconds: float
    # Between one session's end and the next one's start (collect, queue, launch).
    idle_seconds: float = 0.0
    # Seconds of the running session still usable for steps (after its own save), if one runs.
    current_session_left: float | None = None
    quota: QuotaPlan | None = None  # None: no quota (local sessions)
    # What the deadline rule leaves unused at the end of every session (k steps and safety).
    stop_margin_seconds: float = 0.0
    # The running session's own step time, where it differs from the sessions to come.
    current_step_seconds: float | None = None


@dataclass(frozen=True)
class Eta:
    finish_at: datetime
    more_sessions: int  # sessions still to launch after the running one
    quota_waits: int  # how many quota refreshes the plan waits for
    allowance_seconds: float | None  # the quota the plan assumes per period, if any
    earliest: datetime | None = None  # the p10-p90 range of the finish
    latest: datetime | None = None

    def describe(self, now: datetime | None = None) -> str:
        """E.g. 'done Thu 14:00 UTC (13:40-14:30) at 30 h/week, 3 more sessions', or for a
        finish within the hour 'done in 4 min 10 s (3 min 50 s-4 min 40 s), 1 more session'."""
        if now is not None and self.finish_at - now < SHORT_JOB:
            when = f"in {_duration(self.finish_at - now)}"
            if self.earliest is not None and self.latest is not None:
                low, high = _duration(self.earliest - now), _duration(self.latest - now)
                when += f" ({low}\u2013{high})" if low != high else ""
        else:
            when = self.finish_at.strftime("%a %H:%M %Z").strip()
            if self.earliest is not None and self.latest is not None:
                low, high = self.earliest.strftime("%H:%M"), self.latest.strftime("%H:%M")
                when += f" ({low}\u2013{high})" if low != high else ""
        parts = [f"done {when}"]
        if self.allowance_seconds is not None:
            parts[0] += f" at {self.allowance_seconds / 3600:g} h/week"
        sessions = "session" if self.more_sessions == 1 else "sessions"
        parts.append(f"{self.more_sessions} more {sessions}")
        if self.quota_waits:
            parts.append(f"waits for {self.quota_waits} quota refresh(es)")
        return ", ".join(parts)


def _duration(span: timedelta) -> str:
    seconds = max(0, round(span.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


@dataclass(frozen=True)
class SessionRecord:
    """What one finished session measured."""

    steps: int
    train_seconds: float | None
    fixed_seconds: float  # start-up, load, save and upload: what every session pays


def typical_step_seconds(
    history: Sequence[SessionRecord], live_steps: int = 0, live_step_seconds: float | None = None
) -> float | None:
    """The step time sessions to come should see: the median of the sessions' step times,
    each weighted by its steps (the running one's too), so one slow session or a 1-step one
    does not move it."""
    rates = [
        (record.train_seconds / record.steps, record.steps)
        for record in history
        if record.steps > 0 and record.train_seconds
    ]
    if live_steps > 0 and live_step_seconds:
        rates.append((live_step_seconds, live_steps))
    if not rates:
        return None
    rates.sort()
    half = sum(weight for _, weight in rates) / 2
    passed = 0
    for rate, weight in rates:
        passed += weight
        if passed >= half:
            return rate
    return rates[-1][0]


def typical_fixed_seconds(history: Sequence[SessionRecord]) -> float | None:
    """The median fixed cost of the finished sessions."""
    costs = [record.fixed_seconds for record in history]
    return statistics.median(costs) if costs else None


def relative_spread(history: Sequence[SessionRecord]) -> float:
    """One standard deviation of the remaining time, as a fraction: how much the sessions' step
    times differ (weighted by their steps), plus the prior, which shrinks with each session."""
    rates = [
        (record.steps, record.train_seconds / record.steps)
        for record in history
        if record.steps > 0 and record.train_seconds
    ]
    spread = PRIOR_SPREAD**2 / (1 + len(history))
    total = sum(steps for steps, _ in rates)
    if len(rates) > 1 and total:
        mean = sum(steps * rate for steps, rate in rates) / total
        variance = sum(steps * (rate - mean) ** 2 for steps, rate in rates) / total
        spread += variance / mean**2
    return math.sqrt(spread)


def estimate_with_range(inputs: EtaInputs, spread: float) -> Eta | None:
    """`estimate_finish`, with its p10-p90 finish: the same plan with every step and fixed cost
    `Z_P90 * spread` faster, then slower."""
    central = estimate_finish(inputs)
    if central is None:
        return None
    bounds = []
    for sign in (-1.0, 1.0):
        scenario = estimate_finish(inputs, scale=max(0.05, 1.0 + sign * Z_P90 * spread))
        bounds.append(scenario.finish_at if scenario is not None else None)
    earliest = min(bounds[0] or central.finish_at, central.finish_at)
    latest = max(bounds[1] or central.finish_at, central.finish_at)
    return Eta(
        central.finish_at,
        central.more_sessions,
        central.quota_waits,
        central.allowance_seconds,
        earliest=earliest,
        latest=latest,
    )


def steps_in(seconds: float, step_seconds: float) -> int:
    """Whole steps that fit in `seconds` of training time."""
    return max(0, math.floor(seconds / step_seconds + 1e-9))


def estimate_finish(inputs: EtaInputs, *, scale: float = 1.0) -> Eta | None:
    """The finish time if sessions run back to back, each sized to the quota left, with every
    step and fixed cost `scale` times what `inputs` say (the range's scenarios).

    None when no estimate can be made: no measured step time, or a session too short for a
    single step after its overheads.
    """
    step_seconds = inputs.step_seconds * scale
    if step_seconds <= 0:
        return None
    overhead = inputs.overhead_seconds * scale
    remaining = max(0, inputs.remaining_steps)
    now = inputs.now
    if inputs.current_session_left is not None:
        current_step = (inputs.current_step_seconds or inputs.step_seconds) * scale
        in_current = steps_in(inputs.current_session_left, current_step)
        if remaining <= in_current:
            return _eta(now + timedelta(seconds=remaining * current_step), 0, 0, inputs)
        remaining -= in_current
        now += timedelta(seconds=inputs.current_session_left + inputs.idle_seconds)
    elif remaining == 0:
        return _eta(now, 0, 0, inputs)
    usable = inputs.session_seconds - overhead - inputs.stop_margin_seconds
    if steps_in(usable, step_seconds) == 0:
        return None
    return _plan_sessions(inputs, remaining, now, step_seconds, overhead)


def _plan_sessions(
    inputs: EtaInputs, remaining: int, now: datetime, step_seconds: float, overhead: float
) -> Eta | None:
    quota = inputs.quota
    left = quota.seconds_left if quota else math.inf
    refresh_at = quota.refresh_at if quota else None
    sessions = waits = 0
    # A session worth launching.
    minimum = overhead + inputs.stop_margin_seconds + step_seconds
    while sessions < MAX_SESSIONS:
        if left < minimum:
            if quota is None or refresh_at is None or quota.allowance_seconds < minimum:
                return None
            now = max(now, refresh_at)
            left = quota.allowance_seconds
            refresh_at = refresh_at + quota.period
            waits += 1
            continue
        length = min(inputs.session_seconds, left)
        usable = length - overhead - inputs.stop_margin_seconds
        steps = min(remaining, steps_in(usable, step_seconds))
        used = overhead + steps * step_seconds
        sessions += 1
        remaining -= steps
        left -= used
        if remaining == 0:
            return _eta(now + timedelta(seconds=used), sessions, waits, inputs)
        now += timedelta(seconds=used + inputs.idle_seconds)
        if refresh_at is not None and now >= refresh_at and quota is not None:
            left = quota.allowance_seconds
            refresh_at = refresh_at + quota.period
    return None


def _eta(finish_at: datetime, sessions: int, waits: int, inputs: EtaInputs) -> Eta:
    allowance = inputs.quota.allowance_seconds if inputs.quota else None
    return Eta(finish_at, sessions, waits, allowance)
