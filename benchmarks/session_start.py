"""What a local session spends starting: a new interpreter (cold) against a fork of the warm host.

`python -m benchmarks.session_start [--sessions N]` runs N short sessions of the benchmark
workload (3 steps) through Baton's local backend each way, alternating cold and warm in one run,
and prints the medians of what the worker measured itself in `result.json`: `startup` (process
start until the worker's main began, plus importing torch: the part warm starts skip) and `total`
(process start until the result was written), and the wall time from launch to the collected
checkpoint. Every second a session starts is a second of its limit not spent training; on Kaggle
it is the kernel's boot, here it is the interpreter and torch. No goal: the figures say what one
segment saves.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.workload import SMOKE, job_spec
from orchestrator.reference import run_uninterrupted
from orchestrator.spec import JobSpec

STEPS = 3
WAYS = ("cold", "warm")


def measure_session(workdir: Path, *, warm: bool) -> dict[str, float]:
    spec = JobSpec.model_validate(job_spec(SMOKE) | {"total_steps": STEPS})
    launched = time.monotonic()
    collected = run_uninterrupted(spec, workdir, warm_start=warm)
    wall = time.monotonic() - launched
    result = collected.result
    if result is None or not result.committed:
        raise SystemExit(f"a {'warm' if warm else 'cold'} session failed: {collected.problem}")
    return {"startup": result.timings.startup, "total": result.timings.total, "wall": wall}


def run(sessions: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="baton-session-start-") as scratch:
        for index in range(sessions):
            for way in WAYS:  # alternating: a drift of the machine's speed hits both alike
                workdir = Path(scratch) / f"{way}-{index}"
                runs[way].append(measure_session(workdir, warm=way == "warm"))
    return {
        way: {
            "sessions": len(measured),
            **{key: statistics.median(m[key] for m in measured) for key in measured[0]},
        }
        for way, measured in runs.items()
    }


def report(figures: dict[str, Any]) -> str:
    cold, warm = figures["cold"], figures["warm"]
    lines = [
        f"Local session start, {cold['sessions']} sessions of {STEPS} steps each way "
        "(medians, seconds):",
        f"  {'':6} {'startup':>8} {'total':>8} {'wall':>8}",
    ]
    for way in WAYS:
        row = figures[way]
        lines.append(f"  {way:6} {row['startup']:8.2f} {row['total']:8.2f} {row['wall']:8.2f}")
    lines.append(
        f"Warm starts save {cold['startup'] - warm['startup']:.2f} s of each session's start-up "
        f"and {cold['wall'] - warm['wall']:.2f} s of its wall time."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5, help="sessions each way")
    args = parser.parse_args(argv)
    print(report(run(args.sessions)))


if __name__ == "__main__":
    main()
