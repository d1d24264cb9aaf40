"""`python -m benchmarks [--quick|--smoke]`: run the workload four ways, print and record the
comparison."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import way_baton, way_periodic, way_submitit, way_uninterrupted
from benchmarks.doc import render_doc
from benchmarks.long_steps import kept_section
from benchmarks.records import WayResult
from benchmarks.report import measured_table, projection_table, projections
from benchmarks.workload import FULL, QUICK, SMOKE, Workload

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
DOC = REPO_ROOT / "docs" / "benchmarks.md"
WAYS: dict[str, Callable[[Workload, Path], WayResult]] = {
    "a": way_uninterrupted.run,
    "b": way_baton.run,
    "c": way_periodic.run,
    "d": way_submitit.run,
}


def environment() -> dict[str, Any]:
    import submitit
    import torch

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
    ).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "submitit": submitit.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a short run (~90 s)")
    size.add_argument("--smoke", action="store_true", help="one session a way, for CI: no figures")
    parser.add_argument("--out", type=Path, help="the JSON record (default: benchmarks/results/)")
    parser.add_argument("--ways", default="abcd", help="which ways to run (default: abcd)")
    parser.add_argument("--no-doc", action="store_true", help=f"do not rewrite {DOC.name}")
    parser.add_argument("--keep", action="store_true", help="keep the sessions' directories")
    args = parser.parse_args(argv)
    # Sessions import the workload and the worker from the repository, like `baton serve` does.
    os.chdir(REPO_ROOT)
    workload = SMOKE if args.smoke else QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-"))
    results = []
    for key in args.ways:
        print(f"running ({key}) ...", file=sys.stderr, flush=True)
        results.append(WAYS[key](workload, workdir / key))
    env = environment()
    measured, projected = measured_table(results), projection_table(projections(results, workload))
    print(
        f"\nworkload {workload.name}: {workload.total_steps} steps, "
        f"{workload.session_seconds:g} s sessions\n\n{measured}\n\n{projected}"
    )
    for result in results:
        for note in result.notes:
            print(f"({result.key}) {note}")
    out = args.out or RESULTS_DIR / ("latest.json" if workload is FULL else f"{workload.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "environment": env,
        "workload": workload.to_dict(),
        "ways": [r.to_dict() for r in results],
        "projection": [vars(p) for p in projections(results, workload)],
    }
    out.write_text(json.dumps(data, indent=2, default=str))
    print(f"\nwrote {out}")
    if workload is FULL and not args.no_doc and set(args.ways) == set(WAYS):
        # The long-steps benchmark's section is its own (benchmarks.long_steps --doc): kept.
        kept = kept_section(DOC)
        DOC.write_text(
            render_doc(workload, env, results, measured, projected) + ("\n" + kept if kept else "")
        )
        print(f"wrote {DOC.relative_to(REPO_ROOT)}")
    if args.keep:
        print(f"sessions kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
