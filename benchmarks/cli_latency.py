"""How long the `baton` CLI takes to answer: `--help`, `--version` and `jobs` against a live server.

`python -m benchmarks.cli_latency [--runs N] [--jobs J]` serves the API as `baton serve` does
(prestart, then uvicorn on a loopback port) in this process, without its reconcile loop so that
the J jobs it is given stay queued and nothing else runs. Then it times each command as a user
runs it: the installed `baton` script in a fresh process, wall clock from start to exit. Each
round runs a bare `python -c pass` and the three commands once, in that order, so a busy moment
on a shared machine lands on all of them alike; the figures are the median and p90 of N rounds,
and the median CPU time (user + system) of each command, which load inflates less than wall time.
The goal (issue 20): `baton --help` and `baton jobs` each under 300 ms on the 2-core dev machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from benchmarks.api_server import served_api
from orchestrator.cli.jobs import read_spec
from orchestrator.config import Settings

TOKEN = "bt_benchmark-cli-latency-0123456789abcdef"
GOAL_MS = 300.0
DEMO_SPEC = Path(__file__).resolve().parent.parent / "trainers" / "examples" / "demo.yaml"


def baton_script() -> list[str]:
    """The `baton` console script installed beside this Python (what a user runs)."""
    script = Path(sys.executable).parent / "baton"
    if not script.exists():
        raise SystemExit(f"no `baton` script beside {sys.executable}: pip install -e . first")
    return [str(script)]


def idle_server(data_dir: Path) -> AbstractContextManager[str]:
    """The API over a fresh SQLite data dir, no reconcile loop; yields its URL."""
    return served_api(Settings(data_dir=data_dir, admin_token=TOKEN), embedded_loop=False)


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds from start to exit, and the CPU seconds (user + system) the process used,
    which a busy machine inflates less; the command must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def _summary(seconds: list[float], cpu: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "median_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * p90,
        "cpu_median_ms": 1000 * statistics.median(cpu),
    }


def run(runs: int = 20, jobs: int = 20, root: Path | None = None) -> dict[str, Any]:
    """Time every command `runs` times against a server holding `jobs` jobs."""
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = (root or Path(scratch)) / "data"
        with idle_server(data_dir) as url:
            env = {
                **os.environ,
                "BATON_URL": url,
                "BATON_TOKEN": TOKEN,
                "BATON_CONFIG": str(data_dir / "cli-config.toml"),
            }
            spec = read_spec(DEMO_SPEC)
            baton = baton_script()
            for index in range(jobs):
                _submit(baton, env, {**spec, "name": f"latency-{index}"}, data_dir)
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "baton --help": [*baton, "--help"],
                "baton --version": [*baton, "--version"],
                "baton jobs": [*baton, "jobs"],
            }
            seconds: dict[str, list[float]] = {name: [] for name in commands}
            cpu: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(runs):
                for name, argv in commands.items():
                    wall, used = _timed(argv, env)
                    seconds[name].append(wall)
                    cpu[name].append(used)
    load = os.getloadavg()[0]
    return {
        "runs": runs,
        "jobs": jobs,
        "cpus": os.cpu_count(),
        "load_average_1m": load,
        "commands": {name: _summary(seconds[name], cpu[name]) for name in seconds},
    }


def _submit(baton: list[str], env: dict[str, str], spec: dict[str, Any], where: Path) -> None:
    path = where / "spec.json"
    path.write_text(json.dumps(spec))
    _timed([*baton, "submit", str(path), "--json"], env)


def report(figures: dict[str, Any]) -> str:
    commands = figures["commands"]
    bare = commands["python -c pass"]["median_ms"]
    lines = [
        f"{figures['runs']} runs each, {figures['jobs']} jobs listed, {figures['cpus']} CPUs, "
        f"load average {figures['load_average_1m']:.1f} at the end",
        f"{'command':<18}{'median ms':>11}{'p90 ms':>9}{'over bare python':>19}{'CPU ms':>9}",
    ]
    for name, row in commands.items():
        over = row["median_ms"] - bare
        goal = ""
        if not name.startswith("python"):
            goal = " ok" if row["median_ms"] < GOAL_MS else " over the goal"
        lines.append(
            f"{name:<18}{row['median_ms']:>11.0f}{row['p90_ms']:>9.0f}{over:>19.0f}"
            f"{row['cpu_median_ms']:>9.0f}{goal}"
        )
    lines.append(f"goal: `baton --help` and `baton jobs` under {GOAL_MS:.0f} ms (median)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_latency")
    parser.add_argument("--runs", type=int, default=20, help="rounds of the four commands")
    parser.add_argument("--jobs", type=int, default=20, help="jobs on the server for `jobs`")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    figures = run(args.runs, args.jobs)
    print(report(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
