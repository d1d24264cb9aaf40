"""The deadline margin with long steps, measured instead of projected.

Kaggle's 12 h session with the seed guides' 150 s steps, scaled down `--scale` times (default
100: 1.5 s steps in a 432 s session, the safety margin scaled alike), run for real: one local
session of the benchmark workload under the supervisor, the worker's own deadline rule deciding
when to stop and commit. Its start-up is the real one (Python, torch, trainer set-up: ~3 s here,
which stands for ~5 minutes at full scale, between a Kaggle kernel's boot alone and the guides'
12-23 minutes of loading). Prints the measured share of the session spent in completed steps
beside `projection.project_baton`'s arithmetic on the same measured costs, for the whole session
and for the part after start-up (the part the deadline margin decides).

    python -m benchmarks.long_steps [--scale 100] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.projection import GUIDE_STEP_SECONDS, KAGGLE_SESSION_SECONDS, Costs, project_baton
from benchmarks.workload import FULL, job_spec
from orchestrator.reference import run_uninterrupted
from orchestrator.spec import JobSpec
from worker.boundary.contract import DEFAULT_K_STEPS, DEFAULT_SAFETY_SECONDS, MarginPolicy

# A 150 s GPU step keeps the host waiting on the device, steadily: the scaled step is a tiny
# model's few milliseconds of CPU work plus a sleep for the rest, so this shared machine's load
# jitters it as little as possible (the workload's default model takes 40-200 ms here).
_TINY_MODEL = {"n_layer": 1, "d_model": 32, "n_head": 2, "block_size": 32, "batch_size": 4}
_COMPUTE_SECONDS = 0.005


@dataclass(frozen=True)
class LongStepRun:
    scale: float
    session: float
    step: float  # measured mean step
    startup: float  # process start to the first step (imports, set-up, load)
    save: float
    train: float  # inside completed steps
    steps: int
    outcome: str
    projected_in_steps: float

    @property
    def share(self) -> float:
        return self.train / self.session

    @property
    def projected_share(self) -> float:
        return self.projected_in_steps / self.session

    @property
    def after_startup_share(self) -> float:
        return self.train / (self.session - self.startup)

    @property
    def projected_after_startup_share(self) -> float:
        return self.projected_in_steps / (self.session - self.startup)

    @property
    def unused(self) -> float:
        return self.session - self.startup - self.train - self.save

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "share": self.share,
            "projected_share": self.projected_share,
            "after_startup_share": self.after_startup_share,
            "projected_after_startup_share": self.projected_after_startup_share,
        }


def measure(scale: float, workdir: Path) -> LongStepRun:
    session = KAGGLE_SESSION_SECONDS / scale
    step = GUIDE_STEP_SECONDS[1] / scale
    margin = MarginPolicy(DEFAULT_K_STEPS, DEFAULT_SAFETY_SECONDS / scale)
    spec = job_spec(FULL)
    spec["config"] |= _TINY_MODEL
    spec["config"]["step_sleep"] = max(0.0, step - _COMPUTE_SECONDS)
    spec["config"]["log_every"] = 50
    # More steps than fit: the deadline, not the step count, ends the session.
    spec["total_steps"] = int(2 * session / step) + 10
    spec["session"] = {
        "limit_seconds": session,
        "margin": {"k_steps": margin.k_steps, "safety_seconds": margin.safety_seconds},
    }
    collected = run_uninterrupted(JobSpec.model_validate(spec), workdir, limit_seconds=session)
    result = collected.result
    if result is None or not result.committed:
        raise SystemExit(f"the session did not commit: {collected.problem}")
    steps = result.end_step - result.start_step
    timings = result.timings
    mean_step = timings.train / steps
    startup = timings.startup + timings.load
    projected = project_baton(
        "baton", session, Costs(step=mean_step, startup=startup, save=timings.save), margin
    )
    return LongStepRun(
        scale=scale,
        session=session,
        step=mean_step,
        startup=startup,
        save=timings.save,
        train=timings.train,
        steps=steps,
        outcome=result.outcome,
        projected_in_steps=projected.in_steps,
    )


def report(run: LongStepRun) -> str:
    points = 100 * (run.after_startup_share - run.projected_after_startup_share)
    return "\n".join(
        [
            f"scaled {run.scale:g}x: {run.session:.1f} s session, {run.step:.3f} s steps "
            f"(150 s steps in 12 h), outcome {run.outcome}, {run.steps} steps",
            f"start-up {run.startup:.2f} s, save {run.save:.3f} s, unused at the end "
            f"{run.unused:.2f} s",
            f"in completed steps, of the session:        measured {run.share:.2%}, "
            f"projected {run.projected_share:.2%}",
            f"in completed steps, after start-up:        measured {run.after_startup_share:.2%}, "
            f"projected {run.projected_after_startup_share:.2%} ({points:+.2f} points)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.long_steps")
    parser.add_argument("--scale", type=float, default=100.0, help="time scale-down (default 100)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="baton-long-steps-") as workdir:
        run = measure(args.scale, Path(workdir))
    print(report(run))
    if args.out is not None:
        record = run.to_dict() | {
            "started_at": started,
            "machine": f"{platform.machine()}, {platform.system()}",
        }
        args.out.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
