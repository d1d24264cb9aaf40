"""Renders docs/benchmarks.md: the method, then the latest figures and where they were taken."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.records import WayResult
from benchmarks.workload import Workload

METHOD = """\
# Benchmarks

`python -m benchmarks` (from the repository root, in the venv) trains one workload four ways,
prints a comparison and a projection onto a 12 h Kaggle session, writes
`benchmarks/results/latest.json` (gitignored) and rewrites this file. `--quick` is a ~90 s
run with fewer steps and shorter sessions (`benchmarks/results/quick.json`); `--smoke`, one
60 s session a way, is CI's check that the entry point still runs (tests/benchmarks/test_main.py).
Neither touches this file; `--out` writes the record elsewhere.

## The workload

`benchmarks.workload:PacedCharLM`: the TinyCharLM demo (2-layer character transformer, AdamW,
warmup-cosine LR, dropout, resumable sampler; 1.4 MB of state) whose every step ends by sleeping
`step_sleep` = 40 ms, where a GPU step's host blocks on `loss.item()`. The sleep makes a step
~80 ms, long relative to nothing but steady while other processes share the 2 CPUs, and puts the
step's state change before its wait, as on a GPU. All four ways run it with the same seed,
config, deterministic algorithms and one thread, so their final weights can be compared bit for
bit (`worker.digest.model_digest`, the manifest's `model_digest`).

## The four ways

- **(a) uninterrupted**: `orchestrator.reference.run_uninterrupted`, one supervised session with
  no practical limit. The reference digest.
- **(b) Baton**: `baton serve` in-process (prestart, the FastAPI app and its embedded reconcile
  loop under a real uvicorn server on a loopback port, default settings: reconcile every 1 s,
  5 s kill grace, margin k=2 steps + 1 s). The job is `POST`ed to `/api/v1/jobs` and read back
  from `/jobs/{id}/segments`. Each segment is `python -m worker` under the local backend's
  supervisor (SIGTERM at the limit, SIGKILL after the grace, output dropped on timeout).
- **(c) periodic save + hard kill**, what the Kaggle guides do (`save_steps`, "re-run the same
  command to resume"): `benchmarks.periodic_session` resumes from the last save, trains, saves
  every N steps with the worker's atomic `commit_checkpoint` and at the end, and has no SIGTERM
  handler, so the same supervisor's SIGTERM at the limit kills it on the spot. Saves go to a
  directory outside the session, as with Kaggle's "Persistence" or a push to a hub: generous,
  since Kaggle keeps no output of a session that hits its limit. Lost steps at a boundary are
  the steps the session's own event log shows after its last save.
- **(d) submitit**: `submitit.LocalExecutor` running a `submitit.helpers.Checkpointable` whose
  `checkpoint()` saves (same commit function) and returns a fresh callable, with
  `timeout_min` = the session limit and `signal_delay_s` = 2. submitit's own USR2 and requeue do
  the chaining.

(c) and (d) resume exactly like the worker (`benchmarks/loop.py`: verify, seed, set up, load,
restore every RNG last), so any difference comes from when they stop and save, not how.

## What is measured

Per session: **start -> 1st step** (from the process's start time in `/proc`, so Python and torch
imports count), **load** (trainer set-up and checkpoint load, inside the former), **save** (each
commit), time **in steps**, the **session wall** time (the supervisor's, for (a)-(c); for (d)
from one task's process start to the next's). **in steps** = time inside training steps / sum
of session wall times; **kept** = time of the steps the final model keeps, i.e. the final step
count x the mean step time / sum of session wall times. **total wall** runs from submission to
the finished job, so it includes gaps between sessions. Step time is the mean over all steps.

## The projection

`benchmarks/projection.py` (tested in `tests/benchmarks/test_projection.py`) is arithmetic on
the measured step time of (a) and each way's median start-up and save, for a 43,200 s session:

- (a) start once, save once: 12 h - start-up - save.
- (b) the deadline rule stops before a step when now + k·step + 1.25·save + safety > deadline,
  so the last step ends (k - 1/2) steps early on average; nothing is lost at the boundary.
- (c) killed at the limit: each N-step interval costs N steps + one save; a boundary loses N/2
  steps on average, and all of the session if it never reaches its first save.
- (d) training stops at the USR2, `signal_delay_s` before the limit (submitit's Slurm default:
  90 s). The handler runs only when the running C call returns, which on a GPU is the step's
  final sync: if the rest of the step plus the save outlasts the delay, the job is killed before
  it saves and the session keeps nothing (counted as an expected loss).

Local start-up (~3 s) is far below a Kaggle session's (kernel boot, pip installs, mounting
inputs; minutes), so the projected shares are upper bounds for every way alike.
"""

SUBMITIT_FINDINGS = """\
## What submitit's LocalExecutor actually does (submitit 1.5.x source)

- `timeout_min` may be fractional, but the controller truncates it to whole seconds
  (`SUBMITIT_LOCAL_TIMEOUT_S = int(60 * timeout_min)`), and `signal_delay_s` is an int (default
  30 locally, 90 for Slurm as `--signal=USR2@90`). We pass `(limit + 0.5) / 60`.
- The controller (`local/local.py: Controller.wait`) does not read a clock: it counts
  `24 x timeout_s` iterations of `sleep(1/24)` plus a poll each, sends USR2 at iteration
  `24 x (timeout_s - signal_delay_s)`, and at the end SIGINTs, waits 1 s and SIGKILLs. The
  real signal time therefore drifts late with load (measured below).
- USR2's handler (`core/job_environment.py: SignalHandler.checkpoint_and_try_requeue`) calls the
  callable's `checkpoint()` **inside the signal handler**, pickles the returned
  `DelayedSubmission`, and exits with code 144; the controller sees 144 and starts the task
  again in the same controller. Python runs the handler at the next bytecode of the main
  thread, so it can land mid-step: after the optimizer and the sampler moved but before the
  loop's step counter did. A checkpoint taken there resumes one step off, and the final
  weights differ from the uninterrupted run. Baton's worker only sets a flag in its handler
  and stops between steps for this reason.
- SIGTERM is ignored by the job ("Bypassing signal SIGTERM"); only USR2 is acted on.
- `has_timed_out` uses `min(0.8 x limit, limit - 600 s)`: with limits under 10 min every signal
  counts as a timeout and spends one of `max_num_timeout` (default 3: a 4th timeout fails the job).
- Whatever `max_num_timeout` says, the local controller restarts a job at most 6 times
  (`Controller.run(max_retry=6)`); a job that needs a 7th session ends with no result.
- If the task has not exited when the timeout comes, `Controller.run` does not requeue at all:
  the job ends without a result. The exit after `sys.exit(144)` includes tearing down an
  interpreter that imported torch (~1-1.5 s here), which must fit in `signal_delay_s` with the
  save. With a 2 s delay on this busy machine it did not in one of two full runs (2026-11-21):
  the job stopped after 2 of its 4 sessions with no result.
"""


def _extras(results: Sequence[WayResult]) -> str:
    lines = []
    for r in results:
        for note in r.notes:
            lines.append(f"- ({r.key}) {note}")
        gaps = [g for g in r.extra.get("gaps_between_sessions", []) if g is not None]
        if gaps:
            lines.append(
                f"- ({r.key}) from collecting a segment to launching the next: median "
                f"{statistics.median(gaps):.2f} s (a session's end is noticed up to one "
                "reconcile interval, 1 s, later)"
            )
        if r.key in {"b", "d"} and len(r.sessions) > 1:
            cut = r.sessions[:-1]
            tails = [s.wall - (s.first_step or 0) - s.train - sum(s.saves) for s in cut]
            early = [r.extra.get("limit", 0) - s.wall for s in cut]
            lines.append(
                f"- ({r.key}) non-final sessions: after the last step, besides the save (exit), "
                f"median {statistics.median(tails):.2f} s; ended before the limit, median "
                f"{statistics.median(early):.2f} s"
            )
        signals = r.extra.get("signals", [])
        if signals:
            nominal = r.extra["nominal_signal_after_start"]
            seen = ", ".join(f"{s['after_start']:.2f}" for s in signals)
            lines.append(
                f"- ({r.key}) USR2 arrived {seen} s after the task's start (nominal {nominal} s)"
            )
    return "\n".join(lines)


def render_doc(
    workload: Workload,
    env: dict[str, Any],
    results: Sequence[WayResult],
    measured: str,
    projected: str,
) -> str:
    where = (
        f"Measured {env['date']} at commit `{env['commit']}` on {env['machine']} (shared with "
        f"other test runs; load average at the end {env['load_average'][0]:.2f}), Python "
        f"{env['python']}, torch {env['torch']} (CPU), submitit {env['submitit']}. Workload "
        f"`{workload.name}`: {workload.total_steps} steps, {workload.session_seconds:g} s "
        f"sessions, (c) saves every {workload.save_every} steps, (d) USR2 "
        f"{workload.signal_delay_s} s before the limit."
    )
    return "\n".join(
        [
            METHOD,
            "## Latest figures",
            "",
            where,
            "",
            measured,
            "",
            _extras(results),
            "",
            "### Projected onto a 12 h session",
            "",
            projected,
            "",
            SUBMITIT_FINDINGS,
        ]
    )
