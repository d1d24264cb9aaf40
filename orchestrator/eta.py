"""When a job will finish: pure arithmetic over step time, sessions, overheads and quota."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

QUOTA_PERIOD = timedelta(days=7)
# A plan that needs more sessions than this is no plan: the estimate says so instead.
MAX_SESSIONS = 10_000


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


@dataclass(frozen=True)
class Eta:
    finish_at: datetime
    more_sessions: int  # sessions still to launch after the running one
    quota_waits: int  # how many quota refreshes the plan waits for
    allowance_seconds: float | None  # the quota the plan assumes per period, if any

    def describe(self) -> str:
        """E.g. 'done Thu 14:00 UTC at 30 h/week, 3 more sessions'."""
        when = self.finish_at.strftime("%a %H:%M %Z").strip()
        parts = [f"done {when}"]
        if self.allowance_seconds is not None:
            parts[0] += f" at {self.allowance_seconds / 3600:g} h/week"
        sessions = "session" if self.more_sessions == 1 else "sessions"
        parts.append(f"{self.more_sessions} more {sessions}")
        if self.quota_waits:
            parts.append(f"waits for {self.quota_waits} quota refresh(es)")
        return ", ".join(parts)


def steps_in(seconds: float, step_seconds: float) -> int:
    """Whole steps that fit in `seconds` of training time."""
    return max(0, math.floor(seconds / step_seconds + 1e-9))


def estimate_finish(inputs: EtaInputs) -> Eta | None:
    """The finish time if sessions run back to back, each sized to the quota left.

    None when no estimate can be made: no measured step time, or a session too short for a
    single step after its overheads.
    """
    if inputs.step_seconds <= 0:
        return None
    remaining = max(0, inputs.remaining_steps)
    now = inputs.now
    if inputs.current_session_left is not None:
        in_current = steps_in(inputs.current_session_left, inputs.step_seconds)
        if remaining <= in_current:
            return _eta(now + timedelta(seconds=remaining * inputs.step_seconds), 0, 0, inputs)
        remaining -= in_current
        now += timedelta(seconds=inputs.current_session_left + inputs.idle_seconds)
    elif remaining == 0:
        return _eta(now, 0, 0, inputs)
    if steps_in(inputs.session_seconds - inputs.overhead_seconds, inputs.step_seconds) == 0:
        return None
    return _plan_sessions(inputs, remaining, now)


def _plan_sessions(inputs: EtaInputs, remaining: int, now: datetime) -> Eta | None:
    quota = inputs.quota
    left = quota.seconds_left if quota else math.inf
    refresh_at = quota.refresh_at if quota else None
    sessions = waits = 0
    minimum = inputs.overhead_seconds + inputs.step_seconds  # a session worth launching
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
        steps = min(remaining, steps_in(length - inputs.overhead_seconds, inputs.step_seconds))
        used = inputs.overhead_seconds + steps * inputs.step_seconds
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
