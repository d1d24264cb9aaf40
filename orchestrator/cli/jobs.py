"""Commands over a user's jobs: submit, list, show, watch, logs, actions, checkpoints, download."""

from __future__ import annotations

import json
import time
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from orchestrator.api.schemas import (
    CheckpointOut,
    EventOut,
    JobList,
    JobOut,
    QuotaOut,
    SegmentOut,
)
from orchestrator.cli import render
from orchestrator.cli.client import BatonClient
from orchestrator.cli.context import connect
from orchestrator.cli.download import download_checkpoint
from orchestrator.cli.errors import CliError
from orchestrator.lifecycle import FINISHED_JOB_STATES, JobState

JobArg = Annotated[str, typer.Argument(help="the job id")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
IntervalOpt = Annotated[float, typer.Option(help="seconds between two looks", min=0.05)]
FINISHED = frozenset(state.value for state in FINISHED_JOB_STATES)


def read_spec(path: Path) -> dict[str, Any]:
    """A YAML, JSON (a YAML subset) or TOML spec file as a dict; the server validates it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read the spec {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        where = str(exc).replace("\n", " ")
        raise CliError(f"the spec {path} is malformed: {' '.join(where.split())}") from None
    if not isinstance(data, dict):
        raise CliError(f"the spec {path} is malformed: it must be a mapping of fields")
    return data


def follow(client: BatonClient, job_id: str, interval: float = 0.5) -> int:
    """Print the job's events as they happen until it finishes; 0 if it succeeded."""
    last = 0
    while True:
        events = client.call(
            "GET", f"/api/v1/jobs/{job_id}/events", list[EventOut], params={"after": last}
        )
        for event in events:
            last = event.id
            render.console.print(render.event_line(event), markup=False)
        job = client.call("GET", f"/api/v1/jobs/{job_id}", JobOut)
        if job.state in FINISHED:
            render.console.print(render.job_summary(job))
            return 0 if job.state == JobState.SUCCEEDED else 1
        time.sleep(interval)


def watch_progress(client: BatonClient, job_id: str, interval: float = 1.0) -> int:
    """A live bar across segments with the session's deadline and the ETA; 0 if it succeeded."""
    last = 0
    job = client.call("GET", f"/api/v1/jobs/{job_id}", JobOut)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, console=render.console, transient=False) as bar:
        task = bar.add_task(job.name, total=job.total_steps, detail="")
        while True:
            for event in client.call(
                "GET", f"/api/v1/jobs/{job_id}/events", list[EventOut], params={"after": last}
            ):
                last = event.id
                bar.console.print(render.event_line(event), markup=False)
            job = client.call("GET", f"/api/v1/jobs/{job_id}", JobOut)
            segments = client.call("GET", f"/api/v1/jobs/{job_id}/segments", list[SegmentOut])
            done = job.progress.step if job.progress else job.steps_done
            bar.update(
                task,
                completed=done,
                description=_bar_label(job, segments),
                detail=job.eta.text if job.eta else job.state,
            )
            if job.state in FINISHED:
                break
            time.sleep(interval)
    render.console.print(render.job_summary(job))
    return 0 if job.state == JobState.SUCCEEDED else 1


def _bar_label(job: JobOut, segments: list[SegmentOut]) -> str:
    running = [s for s in segments if s.state in ("launching", "running")]
    if not running:
        return f"{job.name} [{job.state}]"
    seg = running[-1]
    label = f"{job.name} seg {seg.index}"
    if seg.launched_at is not None:
        deadline = seg.launched_at + timedelta(seconds=seg.limit_seconds)
        label += f" (session ends {deadline:%H:%M:%S %Z})"
    return label


def submit(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="a YAML, TOML or JSON spec file")],
    watch: Annotated[bool, typer.Option("--watch", "--wait", help="follow it to the end")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job spec."""
    body = read_spec(spec)
    with connect(ctx) as client:
        job = client.call("POST", "/api/v1/jobs", JobOut, body=body)
        if as_json:
            render.print_json(job)
        else:
            render.console.print(render.job_summary(job))
        for warning in job.warnings:
            render.console.print(f"[yellow]warning:[/] {warning}")
        if watch and watch_progress(client, job.id) != 0:
            raise typer.Exit(1)


def jobs(
    ctx: typer.Context,
    state: Annotated[JobState | None, typer.Option(help="only jobs in this state")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
    cursor: Annotated[
        str | None, typer.Option(help="start after this page (the cursor a page printed)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs, newest first."""
    params: dict[str, object] = {"limit": limit}
    if state is not None:
        params["state"] = state.value
    if cursor is not None:
        params["cursor"] = cursor
    with connect(ctx) as client:
        listing = client.call("GET", "/api/v1/jobs", JobList, params=params)
    if as_json:
        render.print_json(listing)
        return
    render.console.print(render.jobs_table(listing.items))
    if listing.next_cursor is not None:
        # Unwrapped, so that the line can be copied whatever the terminal's width.
        render.console.print(f"more: baton jobs --cursor {listing.next_cursor}", soft_wrap=True)


def show(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """A job and its segments."""
    with connect(ctx) as client:
        found = client.call("GET", f"/api/v1/jobs/{job}", JobOut)
        segments = client.call("GET", f"/api/v1/jobs/{job}/segments", list[SegmentOut])
    if as_json:
        document = {
            "job": found.model_dump(mode="json"),
            "segments": [segment.model_dump(mode="json") for segment in segments],
        }
        print(json.dumps(document, indent=2))
        return
    render.console.print(render.job_summary(found))
    render.console.print(render.segments_table(segments))


def watch(ctx: typer.Context, job: JobArg, interval: IntervalOpt = 1.0) -> None:
    """A live progress bar until the job finishes, with the session's deadline and the ETA.

    Exits 0 if the job succeeded, 1 if it failed or was cancelled."""
    with connect(ctx) as client:
        code = watch_progress(client, job, interval)
    if code:
        raise typer.Exit(code)


def logs(
    ctx: typer.Context,
    job: JobArg,
    segment: Annotated[int | None, typer.Argument(help="default: the latest segment")] = None,
    follow_log: Annotated[bool, typer.Option("-f", "--follow", help="keep printing")] = False,
    interval: IntervalOpt = 1.0,
) -> None:
    """A segment's session log (local sessions: live)."""
    with connect(ctx) as client:
        if segment is None:
            segments = client.call("GET", f"/api/v1/jobs/{job}/segments", list[SegmentOut])
            if not segments:
                raise CliError(f"job {job} has no segments yet")
            segment = segments[-1].index
        shown = 0
        while True:
            text = client.request(
                "GET", f"/api/v1/jobs/{job}/segments/{segment}/log", params={"tail": 1_000_000}
            ).text
            print(text[shown:], end="", flush=True)
            shown = len(text)
            if not follow_log:
                return
            state = client.call("GET", f"/api/v1/jobs/{job}/segments", list[SegmentOut])
            if all(s.state not in ("launching", "running") for s in state if s.index == segment):
                return
            time.sleep(interval)


def cancel(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """Cancel a job; a running session is killed and its unsaved steps are lost."""
    _act(ctx, job, "cancel", as_json)


def pause(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """Pause: the running segment commits early, then the job pauses."""
    _act(ctx, job, "pause", as_json)


def resume(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """Resume a paused job, or retry a failed one from its last checkpoint."""
    _act(ctx, job, "resume", as_json)


def _act(ctx: typer.Context, job: str, action: str, as_json: bool) -> None:
    with connect(ctx) as client:
        found = client.call("POST", f"/api/v1/jobs/{job}/{action}", JobOut)
    if as_json:
        render.print_json(found)
    else:
        render.console.print(render.job_summary(found))


def checkpoints(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """A job's committed checkpoints: step, size and digest."""
    with connect(ctx) as client:
        rows = client.call("GET", f"/api/v1/jobs/{job}/checkpoints", list[CheckpointOut])
    if as_json:
        render.print_json(rows)
    else:
        render.console.print(render.checkpoints_table(rows))


def download(
    ctx: typer.Context,
    job: JobArg,
    step: Annotated[int | None, typer.Option(help="default: the latest checkpoint")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="directory")] = None,
) -> None:
    """Download a checkpoint, resuming partial files, and verify every file's sha256."""
    with connect(ctx) as client:
        rows = client.call("GET", f"/api/v1/jobs/{job}/checkpoints", list[CheckpointOut])
        chosen = [row for row in rows if step is None or row.step == step]
        if not chosen:
            raise CliError(f"job {job} has no checkpoint" + (f" at step {step}" if step else ""))
        checkpoint = chosen[-1]
        target = output or Path(f"{job}-step{checkpoint.step}")
        download_checkpoint(client, job, checkpoint, target)
    render.console.print(
        f"step {checkpoint.step}: {len(checkpoint.manifest.get('files', {}))} files verified "
        f"in {target} (model digest {checkpoint.model_digest})"
    )


def quota(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Accelerator time left on your Kaggle account."""
    with connect(ctx) as client:
        rows = client.call("GET", "/api/v1/quota", list[QuotaOut])
    if as_json:
        render.print_json(rows)
    elif not rows:
        render.console.print("no Kaggle quota to show (no Kaggle credentials or Kaggle jobs)")
    else:
        render.console.print(render.quota_table(rows))


def register(app: typer.Typer) -> None:
    for command in (
        submit,
        jobs,
        show,
        watch,
        logs,
        cancel,
        pause,
        resume,
        checkpoints,
        download,
        quota,
    ):
        app.command()(command)
