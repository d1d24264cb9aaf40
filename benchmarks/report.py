"""Turns the four ways' results into the comparison table, the 12 h projection and the doc."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.projection import (
    GUIDE_SAVE_STEPS,
    GUIDE_STEP_SECONDS,
    KAGGLE_SESSION_SECONDS,
    SUBMITIT_SLURM_SIGNAL_DELAY,
    Costs,
    SessionProjection,
    project_baton,
    project_periodic,
    project_submitit,
    project_uninterrupted,
)
from benchmarks.records import WayResult
from benchmarks.workload import Workload


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _seconds(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _losses(result: WayResult) -> str:
    losses = result.boundary_losses
    return ", ".join(str(n) for n in losses) if losses else "- (no boundary)"


def measured_table(results: Sequence[WayResult]) -> str:
    reference = next((r.digest for r in results if r.key == "a"), None)
    header = [
        "way",
        "sessions",
        "lost steps per boundary",
        "in steps",
        "kept",
        "start -> 1st step",
        "of which load",
        "save (x per session)",
        "step",
        "total wall",
        "digest = (a)",
    ]
    rows = []
    for r in results:
        same = "reference" if r.key == "a" else ("yes" if r.digest == reference else "**no**")
        rows.append(
            [
                f"({r.key}) {r.title}",
                str(len(r.sessions)),
                _losses(r),
                f"{r.in_step_share:.1%}",
                f"{r.kept_share:.1%}",
                f"{_seconds(r.median_of('first_step'))} s",
                f"{_seconds(r.median_of('load'))} s",
                f"{_seconds(r.median_save, 3)} s (x{r.saves_per_session:.1f})",
                f"{r.step_seconds * 1000:.0f} ms",
                f"{r.total_wall:.1f} s",
                same,
            ]
        )
    return _table(header, rows)


def _costs(result: WayResult, step: float) -> Costs:
    return Costs(
        step=step, startup=result.median_of("first_step") or 0.0, save=result.median_save or 0.0
    )


def projections(results: Sequence[WayResult], workload: Workload) -> list[SessionProjection]:
    """Each way's measured start-up and save, with (a)'s step time, on a 12 h session."""
    by_key = {r.key: r for r in results}
    session = KAGGLE_SESSION_SECONDS
    step = by_key["a"].step_seconds if "a" in by_key else results[0].step_seconds
    rows: list[SessionProjection] = []
    if "a" in by_key:
        rows.append(project_uninterrupted("(a) uninterrupted", session, _costs(by_key["a"], step)))
    if "b" in by_key:
        costs = _costs(by_key["b"], step)
        rows.append(project_baton("(b) Baton", session, costs))
        slow = Costs(GUIDE_STEP_SECONDS[1], costs.startup, costs.save)
        rows.append(project_baton(f"(b) Baton, {slow.step:.0f} s steps", session, slow))
    if "c" in by_key:
        costs = _costs(by_key["c"], step)
        every = workload.save_every
        rows.append(project_periodic(f"(c) save every {every} steps", session, costs, every))
        rows.append(
            project_periodic(f"(c) save_steps={GUIDE_SAVE_STEPS}", session, costs, GUIDE_SAVE_STEPS)
        )
        for slow_step in GUIDE_STEP_SECONDS:
            slow = Costs(slow_step, costs.startup, costs.save)
            label = f"(c) guides: {GUIDE_SAVE_STEPS} steps x {slow_step:.0f} s"
            rows.append(project_periodic(label, session, slow, GUIDE_SAVE_STEPS))
    if "d" in by_key:
        costs = _costs(by_key["d"], step)
        delay = SUBMITIT_SLURM_SIGNAL_DELAY
        rows.append(project_submitit(f"(d) submitit, USR2 @{delay} s", session, costs, delay))
        slow = Costs(GUIDE_STEP_SECONDS[1], costs.startup, costs.save)
        label = f"(d) submitit @{delay} s, {slow.step:.0f} s steps"
        rows.append(project_submitit(label, session, slow, delay))
    return rows


def projection_table(rows: Sequence[SessionProjection]) -> str:
    header = ["projection (12 h session)", "in steps", "kept", "lost per boundary (expected)"]
    body = []
    for p in rows:
        lost = f"{p.lost_steps:,.1f} steps ({p.in_steps - p.kept:,.0f} s)"
        body.append([p.label, f"{p.in_step_share:.2%}", f"{p.kept_share:.2%}", lost])
    return _table(header, body)
