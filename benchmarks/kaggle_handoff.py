"""`python -m benchmarks.kaggle_handoff`: moving real-size checkpoints between Kaggle sessions.

For each checkpoint size (default 0.15, 2 and 7 GB) and each transport (today's path through the
orchestrator, and the in-kernel default), one job of two sessions runs on the Kaggle API
emulator through Baton's engine and the official client, in one run, side by side. The emulator
charges the public figures of `tests/kaggle_emulator/options.COSTS` (docs/kaggle-emulator.md,
"Costs"): a 100 Mbit/s orchestrator line, 50 MB/s from a kernel to Kaggle's storage, version
processing of 60 s + 100 MB/s, with every duration divided by `--time-factor` (default 100).
No gigabytes are written: each checkpoint holds `size / --size-scale` random bytes (default
1000: 7 GB is 7 MB on disk), and the emulator charges every byte it moves or processes as
`--size-scale` bytes. Counted bytes are scaled back up to the size they stand for.

Figures per size and transport:
- gap: from the end of session 0 to the next session's first step (emulator session end; the
  next session's start plus its worker's start-up and load), in the scaled run's seconds, split
  into its parts, because only some of them are scaled:
  - "Kaggle side": the end of session 0 to the next session's start. Of it, "charged" is what
    the emulator charges by the time factor for the boundary (the new version's processing; on
    today's path also the checkpoint's download and upload over the orchestrator's line, from
    the same formulas the emulator uses), and the rest is Baton's own reaction (its polls and
    API calls, the emulator's queue), which is not scaled;
  - "start-up": the next session's Python and torch start-up and load, on this machine, not
    scaled, and the same on both paths;
  - "real scale": the gap projected to real durations: charged x time factor + the rest +
    start-up (the last two as measured here);
- the seconds the emulator charged on the orchestrator's link over the whole job, at real scale;
- bytes through the orchestrator's link for the boundary (recorded per segment; scaled back up,
  and as counted: in-kernel they are the output's metadata files, which do not grow with the
  checkpoint, so the scaled figure overstates them by the size scale);
- the share of session 0 spent publishing (the in-kernel transport's upload; 0 for today's path).

Then, in the same run, the start-up the wheel set saves (docs/kaggle.md, "Requirements"): one
three-session job with one requirement (a one-file package built here, served by the emulator's
package index, each download charged `package_download_seconds`, 35 s / time factor), twice side
by side: today's install (`wheel_set: false`: every session pip-installs from the index) and the
wheel set (session 0 builds and publishes it, later sessions install offline). Per session: how
it installed, the seconds its install took as measured, the downloads the index counted, and the
install projected to real scale (measured + each download's 35 s less its scaled charge); then
the start-up saved per later session, both ways.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.backends.kaggle.backend import kernel_slug
from tests.factories import (
    kaggle_spec,
    make_settings,
    running_api,
    submit_with_secret,
    wait_finished,
    wheel_file,
)
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.options import COSTS, scaled_costs

GB = 10**9
STEPS = 4


def run_job(
    emulator: Emulator, root: Path, spec: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """`spec` submitted by alice, her key attached to its kernel as the Secret, run to its end
    through the engine: the job, its segments and its kernel's ref."""
    settings = make_settings(root / "data")
    job_id = submit_with_secret(settings, emulator, spec)
    kernel = f"alice/{kernel_slug(job_id)}"
    with running_api(settings, kaggle_url=emulator.url) as api:
        job = wait_finished(api, job_id, timeout=900)
        segments = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return job, segments, kernel


def run_one(
    root: Path, size: float, transport: str, time_factor: float, size_scale: float
) -> dict[str, Any]:
    costs = scaled_costs(time_factor)
    costs.pop("working_bytes_cap")
    real_bytes = max(int(size / size_scale), 1)
    spec = kaggle_spec(
        {
            "enable_internet": True,
            "transport": transport,
            "chain_reserve_seconds": 10.0,
            "keep_versions": 1,
        },
        total_steps=2 * STEPS,
        config={"step_sleep": 0.01, "stop_every_steps": STEPS, "random_state_bytes": real_bytes},
        session={"limit_seconds": 300, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with start_emulator(
        root / "kaggle", queue_seconds=0.2, link_size_scale=size_scale, **costs
    ) as emulator:
        job, segments, kernel = run_job(emulator, root, spec)
        sessions = emulator.sessions(kernel)
        charged = sum(emulator.link_counters(link).seconds_charged for link in ("orchestrator",))
    if job["state"] != "succeeded" or len(sessions) < 2:
        raise SystemExit(f"{size / GB:g} GB over {transport}: the job did not chain: {job}")
    first, second = sessions[0], sessions[1]
    assert first.ended_at is not None
    assert second.started_at is not None
    timings = segments[1]["timings"] or {}
    startup = (timings.get("startup") or 0) + (timings.get("load") or 0)
    boundary = segments[0]["timings"] or {}
    session_seconds = first.ended_at - first.started_at if first.started_at else 0.0
    push_gap = second.started_at - first.ended_at
    charged = boundary_charges(costs, real_bytes * size_scale, boundary.get("transport"))
    return {
        "size_gb": size / GB,
        "transport": boundary.get("transport"),
        "gap_seconds": push_gap + startup,
        "push_gap_seconds": push_gap,
        "charged_seconds": charged,
        "startup_seconds": startup,
        "real_gap_seconds": charged * time_factor + max(0.0, push_gap - charged) + startup,
        "orchestrator_link_seconds_real": charged * time_factor,
        "orchestrator_bytes": int((boundary.get("link_bytes") or 0) * size_scale),
        # Unscaled: in-kernel, what crosses is metadata that does not grow with the checkpoint.
        "orchestrator_bytes_real": int(boundary.get("link_bytes") or 0),
        "publish_share": (boundary.get("upload") or 0.0) / session_seconds
        if session_seconds
        else 0.0,
    }


REQUIREMENT = "baton-bench-req"
REQUIREMENT_SESSIONS = 3


def run_requirements(root: Path, wheel_set: bool, time_factor: float) -> list[dict[str, Any]]:
    """One job of three sessions with one requirement; per session, how it was installed."""
    costs = scaled_costs(time_factor)
    costs.pop("working_bytes_cap")
    wheel_file(root / "pypi", REQUIREMENT, "1.0")
    spec = kaggle_spec(
        {
            "enable_internet": True,
            "requirements": [REQUIREMENT],
            "wheel_set": wheel_set,
            "chain_reserve_seconds": 10.0,
            "keep_versions": 1,
        },
        total_steps=REQUIREMENT_SESSIONS * STEPS,
        config={"step_sleep": 0.01, "stop_every_steps": STEPS},
        session={"limit_seconds": 300, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with start_emulator(
        root / "kaggle", queue_seconds=0.2, package_index=root / "pypi", **costs
    ) as emulator:
        job, segments, kernel = run_job(emulator, root, spec)
        sessions = emulator.sessions(kernel)
        downloads = [at for _, at in emulator.state.packages.downloads]
    if job["state"] != "succeeded":
        raise SystemExit(f"the requirements job (wheel_set {wheel_set}) failed: {job}")
    charge = float(costs["package_download_seconds"])
    rows = []
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    for seg, session in zip(committed, sessions, strict=False):
        timings = seg["timings"] or {}
        end = session.ended_at if session.ended_at is not None else float("inf")
        fetched = sum(1 for at in downloads if (session.started_at or 0.0) <= at <= end)
        seconds = float(timings.get("install") or 0.0)
        rows.append(
            {
                "wheel_set": wheel_set,
                "session": seg["index"],
                "install_from": timings.get("install_from"),
                "install_seconds": seconds,
                "downloads": fetched,
                "install_seconds_real": seconds
                + fetched * (COSTS["package_download_seconds"] - charge),
            }
        )
    return rows


def print_requirements(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The side-by-side table, and the start-up saved per later session (measured, real)."""
    print(
        f"requirements: pip from the index charged {COSTS['package_download_seconds']:g} s a "
        f"download at real scale"
    )
    print(
        f"{'session':>7} {'today':>8} {'s':>6} {'dl':>3} {'real s':>7}   "
        f"{'wheel set':>9} {'s':>6} {'dl':>3} {'real s':>7}"
    )
    today = {r["session"]: r for r in rows if not r["wheel_set"]}
    wheels = {r["session"]: r for r in rows if r["wheel_set"]}
    for index in sorted(set(today) & set(wheels)):
        old, new = today[index], wheels[index]
        print(
            f"{index:>7} {old['install_from']:>8} {old['install_seconds']:>6.2f} "
            f"{old['downloads']:>3} {old['install_seconds_real']:>7.1f}   "
            f"{new['install_from']:>9} {new['install_seconds']:>6.2f} {new['downloads']:>3} "
            f"{new['install_seconds_real']:>7.1f}"
        )
    later = [i for i in sorted(set(today) & set(wheels)) if i > 0]
    saved = {"saved_seconds": float("nan"), "saved_seconds_real": float("nan")}
    if later:
        for key, field in (
            ("saved_seconds", "install_seconds"),
            ("saved_seconds_real", "install_seconds_real"),
        ):
            saved[key] = sum(today[i][field] - wheels[i][field] for i in later) / len(later)
        print(
            f"start-up saved per session after the first: {saved['saved_seconds']:.2f} s as "
            f"measured, {saved['saved_seconds_real']:.1f} s projected to real scale"
        )
    return saved


def boundary_charges(costs: dict[str, float | int], size: float, transport: str | None) -> float:
    """Scaled seconds the emulator charges between two sessions for a checkpoint of `size`
    (tests/kaggle_emulator: `DatasetTiming.processing`, `Links.charge`): the new version's
    processing, and on today's path the checkpoint down and up the orchestrator's line."""
    charged = costs["dataset_processing_seconds"] + size / costs["dataset_bytes_per_second"]
    if transport != "kernel":
        charged += size / costs["orchestrator_download_bytes_per_second"]
        charged += size / costs["orchestrator_upload_bytes_per_second"]
    return float(charged)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kaggle_handoff")
    parser.add_argument("--sizes", default="0.15,2,7", help="checkpoint sizes in GB")
    parser.add_argument("--time-factor", type=float, default=100.0)
    parser.add_argument("--size-scale", type=float, default=1000.0)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="baton-handoff-") as tmp:
        for size in (float(s) * GB for s in args.sizes.split(",")):
            for transport in ("orchestrator", "kernel"):
                root = Path(tmp) / f"{size:g}-{transport}"
                rows.append(run_one(root, size, transport, args.time_factor, args.size_scale))
        requirement_rows = [
            row
            for wheel_set in (False, True)
            for row in run_requirements(
                Path(tmp) / f"requirements-{wheel_set}", wheel_set, args.time_factor
            )
        ]
    print(
        f"time factor {args.time_factor:g}, size scale {args.size_scale:g} "
        f"({time.monotonic() - started:.0f} s wall)"
    )
    print(
        f"{'size':>6} {'transport':>12} {'gap s':>7} {'Kaggle side s':>13} {'charged s':>9} "
        f"{'start-up s':>10} {'real scale s':>12} {'link s (real)':>13} {'bytes via Baton':>16} "
        f"{'(real bytes)':>12} {'publish share':>13}"
    )
    for row in rows:
        print(
            f"{row['size_gb']:>5g}G {row['transport']:>12} {row['gap_seconds']:>7.2f} "
            f"{row['push_gap_seconds']:>13.2f} {row['charged_seconds']:>9.2f} "
            f"{row['startup_seconds']:>10.2f} {row['real_gap_seconds']:>12.0f} "
            f"{row['orchestrator_link_seconds_real']:>13.0f} "
            f"{row['orchestrator_bytes']:>16,} {row['orchestrator_bytes_real']:>12,} "
            f"{row['publish_share']:>13.1%}"
        )
    for size in sorted({row["size_gb"] for row in rows}):
        pair = {row["transport"]: row for row in rows if row["size_gb"] == size}
        if {"orchestrator", "kernel"} <= set(pair):
            new, old = pair["kernel"], pair["orchestrator"]
            shares = {
                key: new[key] / old[key] if old[key] else float("nan")
                for key in ("gap_seconds", "push_gap_seconds", "real_gap_seconds")
            }
            print(
                f"{size:>5g}G: the in-kernel gap is {shares['gap_seconds']:.0%} of today's as "
                f"measured, {shares['push_gap_seconds']:.0%} on the Kaggle side (scaled), "
                f"{shares['real_gap_seconds']:.0%} projected to real scale"
            )
    saved = print_requirements(requirement_rows)
    if args.out is not None:
        document = {
            "args": vars(args) | {"out": str(args.out)},
            "rows": rows,
            "requirements": {"rows": requirement_rows, **saved},
        }
        args.out.write_text(json.dumps(document))


if __name__ == "__main__":
    main()
