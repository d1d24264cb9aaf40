"""Projects measured costs onto a long session (Kaggle's 12 h): pure arithmetic, no I/O.

For each way: how many seconds of a session go into training steps, how many of those survive
into the next session, and how many steps a boundary loses on average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from worker.boundary.contract import MarginPolicy
from worker.boundary.planning import ESTIMATE_PADDING

KAGGLE_SESSION_SECONDS = 12 * 3600.0
SUBMITIT_SLURM_SIGNAL_DELAY = 90  # SlurmExecutor's default signal_delay_s (USR2@90)
SUBMITIT_LOCAL_SIGNAL_DELAY = 30  # LocalExecutor's default
GUIDE_SAVE_STEPS = 500  # the seed guides' (and HF Trainer's default) save_steps
GUIDE_STEP_SECONDS = (100.0, 150.0)  # the seed guides' step time on 2xT4


@dataclass(frozen=True)
class Costs:
    """Measured per-session costs of a way."""

    step: float  # seconds per training step
    startup: float  # process start until the first step, loading included
    save: float  # one checkpoint save


@dataclass(frozen=True)
class SessionProjection:
    label: str
    session: float
    in_steps: float  # seconds inside training steps
    kept: float  # seconds of steps the next session does not redo
    lost_steps: float  # expected steps lost at a boundary

    @property
    def in_step_share(self) -> float:
        return self.in_steps / self.session

    @property
    def kept_share(self) -> float:
        return self.kept / self.session


def project_uninterrupted(label: str, session: float, costs: Costs) -> SessionProjection:
    """The ceiling: start once, train, save once at the end."""
    in_steps = max(0.0, session - costs.startup - costs.save)
    return SessionProjection(label, session, in_steps, in_steps, 0.0)


def project_baton(
    label: str,
    session: float,
    costs: Costs,
    margin: MarginPolicy | None = None,
    exit_seconds: float = 0.0,
) -> SessionProjection:
    """Stop before a step once now + k·step + reserved > deadline; commit; nothing is lost.

    The last step ends somewhere in the step before the rule fires: (k - 1/2) steps early on
    average. Reserved = padded save estimate + exit + safety, as the planner learns them.
    """
    margin = margin or MarginPolicy()
    reserved = costs.save * ESTIMATE_PADDING + exit_seconds * ESTIMATE_PADDING
    reserved += margin.safety_seconds
    stop = session - reserved - (margin.k_steps - 0.5) * costs.step
    in_steps = max(0.0, stop - costs.startup)
    return SessionProjection(label, session, in_steps, in_steps, 0.0)


def project_periodic(
    label: str, session: float, costs: Costs, save_every: int
) -> SessionProjection:
    """Save every N steps, killed at the limit: a boundary loses N/2 steps on average.

    A session that cannot reach its first save keeps nothing at all.
    """
    per_step = costs.step + costs.save / save_every
    steps = max(0.0, session - costs.startup) / per_step
    saves = math.floor(steps / save_every)
    in_steps = steps * costs.step
    if saves == 0:
        return SessionProjection(label, session, in_steps, 0.0, steps)
    lost = min(save_every / 2, steps)
    return SessionProjection(label, session, in_steps, (steps - lost) * costs.step, lost)


def project_submitit(
    label: str, session: float, costs: Costs, signal_delay: float
) -> SessionProjection:
    """USR2 `signal_delay` before the limit; the handler saves once the running C call returns.

    While the host blocks in a device sync, Python runs the handler only when the step ends, up
    to a step later. If the rest of the step plus the save overruns the delay, the job is
    killed before it saved and the session keeps nothing: that happens with probability
    (step + save - delay) / step, counted here as an expected loss.
    """
    in_steps = max(0.0, session - signal_delay - costs.startup)
    p_lost = min(1.0, max(0.0, (costs.step + costs.save - signal_delay) / costs.step))
    lost_steps = p_lost * in_steps / costs.step
    return SessionProjection(label, session, in_steps, (1 - p_lost) * in_steps, lost_steps)
