"""The session watches its own health beside the training loop: hung steps and divergence.

Nothing outside a Kaggle kernel can stop it, so a hung collective or a loss gone NaN would burn
the rest of the session. Two checks, both pure decisions plus one small action:

- **Hang:** no step ended within `hang_bound` (a multiple of the learned step time, with a
  floor). A daemon thread notices, dumps every thread's stack to the log (faulthandler) and ends
  the process; on several ranks every rank runs its own watch, and a rank blocked in a
  collective behind a hung peer stops seeing steps too, so all of them end within the bound.
  The next segment resumes from the last commit.
- **Divergence:** a non-finite loss or gradient norm on `divergence_steps` consecutive steps.
  The runtime then stops without committing the diverged state.

Standard library only: this module travels into Kaggle kernels with the worker.
"""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from worker.boundary.contract import WatchdogPolicy

log = logging.getLogger("worker.watchdog")

# The metrics a step reports that must stay finite.
WATCHED_METRICS = ("loss", "grad_norm")
# How often the watch thread looks, as a share of the floor (and at most once a second).
POLLS_PER_FLOOR = 10


def hang_bound(step_seconds: float | None, policy: WatchdogPolicy) -> float:
    """Seconds without a finished step after which the session counts as hung."""
    return policy.hang_bound(step_seconds)


def non_finite(metrics: Mapping[str, float]) -> list[str]:
    """The watched metrics of one step that are NaN or infinite."""
    return [key for key in WATCHED_METRICS if key in metrics and not math.isfinite(metrics[key])]


@dataclass
class DivergenceCounter:
    """Counts consecutive steps with a non-finite loss or gradient norm."""

    limit: int
    streak: int = 0
    first_bad_step: int | None = None

    def record(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Add step `step`'s metrics; True once `limit` steps in a row were non-finite."""
        if non_finite(metrics):
            if self.streak == 0:
                self.first_bad_step = step
            self.streak += 1
        else:
            self.streak, self.first_bad_step = 0, None
        return self.limit > 0 and self.streak >= self.limit


def divergence_reason(diverged_at: int, last_good: int | None) -> str:
    where = f"step {last_good}" if last_good is not None else "none (the job restarts at step 0)"
    return f"diverged at step {diverged_at}; last good checkpoint at {where}"


@dataclass
class _Beat:
    at: float
    step: int
    step_seconds: float | None


class HangWatch:
    """A daemon thread that calls `on_hang(reason)` once no step ended within the bound.

    `beat` is the loop's only call: at the start of training and after every step. `check` is
    the pure decision; the thread and the action are the seams tests replace.
    """

    def __init__(
        self,
        policy: WatchdogPolicy,
        clock: Callable[[], float],
        on_hang: Callable[[str], None],
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.on_hang = on_hang
        self._beat: _Beat | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, step: int, step_seconds: float | None) -> None:
        self._beat = _Beat(self.clock(), step, step_seconds)

    def check(self, now: float) -> str | None:
        """The hang reason if the last beat is older than the bound, else None."""
        beat = self._beat
        if beat is None:
            return None
        bound = hang_bound(beat.step_seconds, self.policy)
        if now - beat.at <= bound:
            return None
        return (
            f"hung: no step ended within {bound:.0f} s after step {beat.step} "
            "(every thread's stack is in the session log)"
        )

    def start(self) -> HangWatch:
        if self.policy.hang_floor_seconds > 0:
            self._thread = threading.Thread(target=self._run, name="baton-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    @property
    def poll_seconds(self) -> float:
        return min(1.0, self.policy.hang_floor_seconds / POLLS_PER_FLOOR)

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_seconds):
            reason = self.check(self.clock())
            if reason is not None:
                self.on_hang(reason)
                return


def dump_stacks_and_exit(reason: str, exit_code: int, before_exit: Callable[[], None]) -> None:
    """The hang action: every thread's stack to the log, `before_exit`, then end the process.

    `os._exit`, not `sys.exit`: the main thread is stuck (in a collective, a dataloader), so
    nothing that waits for it, atexit handlers or a process-group teardown, may run.
    """
    log.error("%s", reason)
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    before_exit()
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(exit_code)
