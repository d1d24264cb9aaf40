"""Rich tables and one-line summaries of the API's models, and --json output for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from orchestrator.preflight import Outcome, Report

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orchestrator.wire import (
        CheckpointOut,
        EventOut,
        JobOut,
        JobSummary,
        MetricPoint,
        QuotaOut,
        SegmentOut,
    )

console = Console(highlight=False)

STATE_STYLES = {
    "queued": "cyan",
    "running": "blue",
    "waiting": "yellow",
    "paused": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
}


def print_json(value: BaseModel | Sequence[BaseModel]) -> None:
    from pydantic import TypeAdapter

    # Plain print: Rich would wrap long lines and break the JSON.
    data = TypeAdapter(type(value)).dump_json(value, indent=2)
    print(data.decode())


def state(value: str) -> str:
    return f"[{STATE_STYLES.get(value, 'white')}]{value}[/]"


def steps(job: JobSummary) -> str:
    done = job.progress.step if job.progress else job.steps_done
    mark = "~" if job.progress and job.progress.estimated else ""
    stalled = " [bold red]stalled[/]" if job.progress and job.progress.stalled else ""
    return f"{mark}{done}/{job.total_steps}{stalled}"


def jobs_table(jobs: Sequence[JobSummary]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("id", "name", "state", "steps", "eta", "reason"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            job.id,
            job.name,
            state(job.state),
            steps(job),
            job.eta.text if job.eta else "",
            job.reason or job.queue_reason or "",
        )
    return table


def job_summary(job: JobOut) -> str:
    line = f"{job.id}  {job.name}  {state(job.state)}  {steps(job)} steps"
    if job.progress and job.progress.loss is not None:
        line += f"  loss {job.progress.loss:.4g}"
    if job.eta:
        line += f"  ({job.eta.text})"
    if job.reason or job.queue_reason:
        line += f"\n  {job.reason or job.queue_reason}"
    return line


def job_facts(
    job: JobOut,
    segments: Sequence[SegmentOut],
    metrics: Sequence[MetricPoint],
    checkpoints: Sequence[CheckpointOut],
) -> str:
    """The summary's lines: spec, times, quota used per phase, last metrics, digest."""
    from orchestrator.quota_use import quota_use

    now = datetime.now(UTC)
    session = job.spec.get("session", {})
    lines = [
        f"  trainer {job.spec.get('trainer', '?')} on {job.backend}, "
        f"sessions of {session.get('limit_seconds', '?')} s",
    ]
    start, end = job.started_at or job.created_at, job.finished_at or now
    took = f"took {end - start}" if job.finished_at else f"running for {end - start}"
    times = f"  created {job.created_at:%Y-%m-%d %H:%M:%S} UTC"
    if job.finished_at:
        times += f", finished {job.finished_at:%Y-%m-%d %H:%M:%S} UTC"
    lines.append(f"{times}; {took.split('.')[0]}")
    lines.append(f"  quota used: {quota_use(segments, now, job.progress).describe()}")
    if metrics:
        last = metrics[-1]
        shown = ", ".join(f"{key} {value:.4g}" for key, value in last.values.items())
        lines.append(f"  last metrics at step {last.step}: {shown}")
    if checkpoints:
        newest = checkpoints[-1]
        lines.append(f"  model digest {newest.model_digest} (step {newest.step})")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else ""


def _moved(transport: str | None, link_bytes: int | None) -> str:
    """How the segment's checkpoint reached the next session, and the bytes through Baton."""
    if transport is None:
        return ""
    where = "in Kaggle" if transport == "kernel" else "via Baton"
    return f"{where} {human_bytes(link_bytes or 0)}"


def _installed(install_from: str | None, seconds: float | None) -> str:
    """How the session installed the job's requirements (worker/wheelhouse.py), and how long."""
    if install_from is None:
        return ""
    return f"{install_from} {_seconds(seconds)}".strip()


def segments_table(segments: Sequence[SegmentOut]) -> Table:
    table = Table(box=None, header_style="bold")
    columns = (
        "seg",
        "state",
        "outcome",
        "steps",
        "startup s",
        "load s",
        "train s",
        "save s",
        "moved",
        "reqs",
        "error",
    )
    for column in columns:
        table.add_column(column, justify="right" if column.endswith(" s") else "left")
    for seg in segments:
        timings = seg.timings
        end = seg.end_step if seg.end_step is not None else "?"
        table.add_row(
            str(seg.index),
            state(seg.state),
            seg.outcome or "",
            f"{seg.start_step}-{end}",
            _seconds(timings.startup if timings else None),
            _seconds(timings.load if timings else None),
            _seconds(timings.train if timings else None),
            _seconds(timings.save if timings else None),
            _moved(timings.transport, timings.link_bytes) if timings else "",
            _installed(timings.install_from, timings.install) if timings else "",
            (seg.error or "").strip().splitlines()[-1][:60] if seg.error else "",
        )
    return table


# `baton compare` shows at most this many steps: evenly spaced, the first and last included.
COMPARE_ROWS = 20


def compare_rows(
    key: str,
    first: Sequence[MetricPoint],
    second: Sequence[MetricPoint],
    limit: int | None = COMPARE_ROWS,
) -> list[tuple[int, float | None, float | None]]:
    """`key` of two jobs side by side, by step: every step either logged it, or `limit` of them."""
    ours = {point.step: point.values[key] for point in first if key in point.values}
    theirs = {point.step: point.values[key] for point in second if key in point.values}
    every = sorted(ours.keys() | theirs.keys())
    if limit is not None and len(every) > limit > 1:
        every = [every[round(i * (len(every) - 1) / (limit - 1))] for i in range(limit)]
    return [(step, ours.get(step), theirs.get(step)) for step in every]


def compare_table(
    key: str, names: tuple[str, str], rows: Sequence[tuple[int, float | None, float | None]]
) -> Table:
    table = Table(box=None, header_style="bold", title=key, title_justify="left")
    table.add_column("step", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for step, first, second in rows:
        table.add_row(str(step), _value(first), _value(second))
    return table


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def checkpoints_table(checkpoints: Sequence[CheckpointOut]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("step", "segment", "size", "model digest", "created", "files"):
        table.add_column(column)
    for row in checkpoints:
        table.add_row(
            str(row.step),
            str(row.segment_index),
            human_bytes(row.bytes),
            row.model_digest[:16],
            row.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            _files(row),
        )
    return table


def _files(row: CheckpointOut) -> str:
    if row.kept:
        return "kept on Kaggle (fetched at the first download)" if row.on_kaggle else "kept"
    return "rejected" if row.rejected else "pruned"


def quota_table(quotas: Sequence[QuotaOut]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("account", "accelerator", "hours left", "refreshes"):
        table.add_column(column)
    for row in quotas:
        refresh = row.refresh_at.strftime("%a %Y-%m-%d %H:%M %Z") if row.refresh_at else ""
        table.add_row(row.account, row.accelerator, f"{row.seconds_left / 3600:.1f}", refresh)
    return table


def event_line(event: EventOut) -> str:
    where = f"segment {event.segment_index}" if event.segment_index is not None else "job"
    detail = f": {event.message}" if event.message else ""
    return f"  {event.created_at:%H:%M:%S}  {where:<11} {event.kind}{detail}"


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def until(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return ""
    left = (moment - (now or datetime.now(UTC))).total_seconds()
    return f"{max(0, int(left))} s"


def preflight_table(report: Report) -> Table:
    """A preflight's checks (`baton kaggle check`, `baton slurm check`), one row each."""
    style = {Outcome.OK: "green", Outcome.WARN: "yellow", Outcome.FAIL: "red"}
    table = Table("check", "result", "detail")
    for check in report.checks:
        table.add_row(check.name, f"[{style[check.outcome]}]{check.outcome}[/]", check.detail)
    return table
