"""Commands over a user's jobs: submit, list, show, watch, logs, actions, checkpoints, download.

The API's wire models are imported inside each command: pydantic and the models cost about a
twentieth of a second, which `baton --help` does without.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from orchestrator.cli import render
from orchestrator.cli.context import connect
from orchestrator.cli.errors import CliError
from orchestrator.lifecycle import FINISHED_JOB_STATES, JobState

if TYPE_CHECKING:
    from orchestrator.cli.client import BatonClient
    from orchestrator.wire import JobOut, SegmentOut

JobArg = Annotated[str, typer.Argument(help="the job id")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
IntervalOpt = Annotated[float, typer.Option(help="seconds between two looks", min=0.05)]
FINISHED = frozenset(state.value for state in FINISHED_JOB_STATES)
STATES = tuple(state.value for state in JobState)
# While the server is unreachable, `watch` looks again after 0.5 s, then twice as long each
# time, up to this.
RECONNECT_CAP_SECONDS = 5.0
# After a Ctrl-C, the longest a watch may take to unwind before it leaves regardless.
DETACH_GRACE_SECONDS = 3.0
# A watch's pauses look this often whether Ctrl-C asked it to detach.
PAUSE_SLICE_SECONDS = 0.1
T = TypeVar("T")


def read_spec(path: Path) -> dict[str, Any]:
    """A YAML, JSON (a YAML subset) or TOML spec file as a dict; the server validates it."""
    import yaml  # here: only submit reads a spec

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


def job_page(client: BatonClient, job_id: str) -> str:
    return f"{client.url}/ui/jobs/{job_id}"


def follow(client: BatonClient, job_id: str, interval: float = 0.5) -> int:
    """Print the job's events as they happen until it finishes; 0 if it succeeded."""
    from orchestrator.wire import EventOut, JobOut

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


def reconnecting(
    look: Callable[[], T], say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep
) -> T:
    """`look()`, again and again while the server cannot be reached (it is restarting), waiting
    0.5 s, then twice as long each time up to RECONNECT_CAP_SECONDS; says so once per outage."""
    from orchestrator.cli.client import ServerUnreachable

    wait = 0.5
    told = False
    while True:
        try:
            answer = look()
        except ServerUnreachable as exc:
            if not told:
                say(f"{exc}; reconnecting…")
                told = True
            sleep(wait)
            wait = min(wait * 2, RECONNECT_CAP_SECONDS)
            continue
        if told:
            say("reconnected")
        return answer


def watch_progress(
    client: BatonClient,
    job_id: str,
    interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """A live bar across segments with the session's deadline and the ETA; 0 if it succeeded.

    Survives a server restart: while the server is unreachable it says "reconnecting…" and
    looks again with backoff, then goes on from the last event it printed. It waits with
    `sleep` (a `Detach.pause` under `detachable`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from orchestrator.wire import EventOut, JobOut, SegmentOut

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

        def say(line: str) -> None:
            bar.console.print(line, markup=False)

        def look() -> tuple[list[EventOut], JobOut, list[SegmentOut]]:
            events = client.call(
                "GET", f"/api/v1/jobs/{job_id}/events", list[EventOut], params={"after": last}
            )
            found = client.call("GET", f"/api/v1/jobs/{job_id}", JobOut)
            segments = client.call("GET", f"/api/v1/jobs/{job_id}/segments", list[SegmentOut])
            return events, found, segments

        while True:
            events, job, segments = reconnecting(look, say, sleep)
            for event in events:
                last = event.id
                say(render.event_line(event))
            done = job.progress.step if job.progress else job.steps_done
            bar.update(
                task,
                completed=done,
                description=_bar_label(job, segments),
                detail=job.eta.text if job.eta else job.state,
            )
            if job.state in FINISHED:
                break
            sleep(interval)
    render.console.print(render.job_summary(job))
    return 0 if job.state == JobState.SUCCEEDED else 1


class Detach:
    """What Ctrl-C asked of a watch: to stop at its next pause (see `detachable`)."""

    def __init__(self) -> None:
        self.requested = False

    def pause(self, seconds: float) -> None:
        """Sleep `seconds` in slices of PAUSE_SLICE_SECONDS; raise KeyboardInterrupt as soon as
        Ctrl-C has asked to detach."""
        end = time.monotonic() + seconds
        while not self.requested:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, PAUSE_SLICE_SECONDS))
        raise KeyboardInterrupt


@contextmanager
def detachable(job_id: str) -> Iterator[Detach]:
    """Ctrl-C stops watching, not the job: say so, and how to come back (exit 130).

    The handler only asks: the watch's next `Detach.pause` raises KeyboardInterrupt, from
    Baton's own code, and it unwinds as usual, so the progress bar gives the terminal back.
    Raised by the handler itself, the interrupt could land in a C extension's callback that
    cannot raise it (a pydantic pattern check printed "Exception ignored … KeyboardInterrupt" and
    the watch went on). Should the unwinding stall or no pause come (a call that hangs), the
    process leaves anyway DETACH_GRACE_SECONDS later, with the same line and code: watching holds
    nothing to save."""
    detach = Detach()
    told = threading.Event()
    line = f"\ndetached; re-attach with baton watch {job_id}\n"

    def leave() -> None:
        if not told.is_set():
            os.write(sys.stderr.fileno(), line.encode())  # no lock the stalled thread may hold
        os._exit(130)

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if detach.requested:
            return
        detach.requested = True
        timer = threading.Timer(DETACH_GRACE_SECONDS, leave)
        timer.daemon = True
        timer.start()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield detach
    except KeyboardInterrupt:
        told.set()
        print(line, end="", file=sys.stderr)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGINT, previous)


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


def _check_kaggle_credentials(client: BatonClient, body: dict[str, Any]) -> None:
    """A Kaggle job needs the user's Kaggle credentials on the server: say how to store them."""
    from orchestrator.cli.client import Refused
    from orchestrator.wire import KaggleCredentialsOut

    if body.get("backend") != "kaggle":
        return
    try:
        client.call("GET", "/api/v1/credentials/kaggle", KaggleCredentialsOut)
    except Refused as exc:
        if exc.status != 404:
            raise
        raise CliError(
            "a Kaggle job needs your Kaggle credentials on the server first: "
            "baton kaggle-credentials --username YOUR_KAGGLE_NAME (the key is read from stdin)"
        ) from None


def submit(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="a YAML, TOML or JSON spec file")],
    watch: Annotated[bool, typer.Option("--watch", "--wait", help="follow it to the end")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job spec; prints the job and its page on the status page."""
    from orchestrator.wire import JobOut

    body = read_spec(spec)
    with connect(ctx) as client:
        _check_kaggle_credentials(client, body)
        job = client.call("POST", "/api/v1/jobs", JobOut, body=body)
        if not watch:
            _show_submitted(client, job, as_json)
            return
        # From here on the job exists: Ctrl-C while watching it only detaches.
        with detachable(job.id) as detach:
            _show_submitted(client, job, as_json)
            code = watch_progress(client, job.id, sleep=detach.pause)
    if code:
        raise typer.Exit(code)


def _show_submitted(client: BatonClient, job: JobOut, as_json: bool) -> None:
    if as_json:
        render.print_json(job)
    else:
        render.console.print(render.job_summary(job))
        render.console.print(f"page: {job_page(client, job.id)}", markup=False)
    for warning in job.warnings:
        render.console.print(f"[yellow]warning:[/] {warning}")


def _job_state(value: str | None) -> str | None:
    """A state name, checked here so that a wrong one is one line that lists the right ones."""
    if value is None or value in STATES:
        return value
    raise CliError(f"--state {value!r} is not a job state: use one of {', '.join(STATES)}")


def jobs(
    ctx: typer.Context,
    state: Annotated[
        str | None,
        typer.Option(help=f"only jobs in this state: {', '.join(STATES)}"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
    cursor: Annotated[
        str | None, typer.Option(help="start after this page (the cursor a page printed)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs, newest first."""
    from orchestrator.wire import JobList

    params: dict[str, object] = {"limit": limit}
    chosen = _job_state(state)
    if chosen is not None:
        params["state"] = chosen
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
    """A job's summary (times, quota used per phase, last metrics, digest) and its segments,
    with each session's start-up, load, train and save seconds."""
    from orchestrator.wire import CheckpointOut, JobOut, MetricPoint, SegmentOut

    with connect(ctx) as client:
        found = client.call("GET", f"/api/v1/jobs/{job}", JobOut)
        segments = client.call("GET", f"/api/v1/jobs/{job}/segments", list[SegmentOut])
        metrics = client.call("GET", f"/api/v1/jobs/{job}/metrics", list[MetricPoint])
        kept = client.call("GET", f"/api/v1/jobs/{job}/checkpoints", list[CheckpointOut])
    if as_json:
        document = {
            "job": found.model_dump(mode="json"),
            "segments": [segment.model_dump(mode="json") for segment in segments],
        }
        print(json.dumps(document, indent=2))
        return
    render.console.print(render.job_summary(found))
    render.console.print(
        render.job_facts(found, segments, metrics, kept), markup=False, soft_wrap=True
    )
    render.console.print(render.segments_table(segments))


def watch(ctx: typer.Context, job: JobArg, interval: IntervalOpt = 1.0) -> None:
    """A live progress bar until the job finishes, with the session's deadline and the ETA.

    Reconnects if the server restarts. Exits 0 if the job succeeded, 1 if it failed or was
    cancelled; Ctrl-C detaches and leaves the job running."""
    with connect(ctx) as client, detachable(job) as detach:
        code = watch_progress(client, job, interval, sleep=detach.pause)
    if code:
        raise typer.Exit(code)


def logs(
    ctx: typer.Context,
    job: JobArg,
    segment: Annotated[int | None, typer.Argument(help="default: the latest segment")] = None,
    follow_log: Annotated[
        bool,
        typer.Option(
            "-f",
            "--follow",
            help="keep printing, into each next session, until the job ends (survives a "
            "server restart)",
        ),
    ] = False,
    offset: Annotated[
        int | None,
        typer.Option(
            min=0, help="start at this byte of the segment's log (the whole log, not its end)"
        ),
    ] = None,
    interval: IntervalOpt = 1.0,
) -> None:
    """A segment's session log: its end, or with -f the whole job from there on."""
    from orchestrator.cli.follow_log import Position, follow_job_log, read_chunk
    from orchestrator.wire import SegmentOut

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    with connect(ctx) as client:
        if segment is None:
            segments = client.call("GET", f"/api/v1/jobs/{job}/segments", list[SegmentOut])
            if not segments:
                raise CliError(f"job {job} has no segments yet")
            segment = segments[-1].index
        if follow_log:
            with detachable(job) as detach:
                follow_job_log(
                    client,
                    job,
                    Position(segment, offset or 0),
                    write=write,
                    say=lambda line: print(line, file=sys.stderr, flush=True),
                    interval=interval,
                    sleep=detach.pause,
                )
            return
        if offset is not None:
            chunk = read_chunk(client, job, Position(segment, offset))
            write(chunk.text if chunk else "")
            return
        text = client.request("GET", f"/api/v1/jobs/{job}/segments/{segment}/log").data
        write(text.decode(errors="replace"))


def _kept(client: BatonClient, job: str) -> str:
    """What a cancelled job keeps: its committed checkpoints, downloadable."""
    from orchestrator.wire import CheckpointOut

    rows = client.call("GET", f"/api/v1/jobs/{job}/checkpoints", list[CheckpointOut])
    if not rows:
        return "no checkpoint was committed, so no weights are kept"
    return (
        f"its {len(rows)} kept checkpoint(s), up to step {rows[-1].step}, stay downloadable "
        f"(baton download {job})"
    )


def cancel(
    ctx: typer.Context,
    job: JobArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job, after asking: a running session is killed and its unsaved steps are lost;
    the committed checkpoints are kept."""
    from orchestrator.wire import JobOut

    with connect(ctx) as client:
        found = client.call("GET", f"/api/v1/jobs/{job}", JobOut)
        kept = _kept(client, job)
        # A finished job is not asked about: the server answers why it cannot be cancelled.
        if not yes and found.state not in FINISHED:
            render.console.print(
                f"Cancel {found.id} ({found.name}, {found.state}, {render.steps(found)} steps)? "
                f"A running session is killed and steps since its last checkpoint are lost; "
                f"{kept}.",
                markup=False,
            )
            try:
                confirmed = typer.confirm("Cancel it?", default=False)
            except typer.Abort:
                raise CliError(
                    "not cancelled: no answer (pass --yes to skip the question)"
                ) from None
            if not confirmed:
                raise CliError(f"not cancelled: {found.id} is left as it was")
        cancelled = client.call("POST", f"/api/v1/jobs/{job}/cancel", JobOut)
    if as_json:
        render.print_json(cancelled)
        return
    render.console.print(render.job_summary(cancelled))
    render.console.print(f"kept: {kept}", markup=False)
    _say_whether_kaggle_hears(found.spec, "cancel")


def pause(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """Pause: the running segment commits early, then the job pauses."""
    _act(ctx, job, "pause", as_json)


def resume(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """Resume a paused job, or retry a failed one from its last checkpoint."""
    _act(ctx, job, "resume", as_json)


class Backend(StrEnum):
    LOCAL = "local"
    KAGGLE = "kaggle"


def move(
    ctx: typer.Context,
    job: JobArg,
    backend: Annotated[Backend, typer.Option(help="where the job continues")],
    as_json: JsonOpt = False,
) -> None:
    """Move a paused job to another backend; `baton resume` continues it there from its newest
    checkpoint (to Kaggle with its Kaggle options, or the defaults after a move away)."""
    from orchestrator.wire import JobOut

    with connect(ctx) as client:
        moved = client.call(
            "POST", f"/api/v1/jobs/{job}/move", JobOut, body={"backend": backend.value}
        )
    if as_json:
        render.print_json(moved)
    else:
        render.console.print(render.job_summary(moved))
        render.console.print(f"moved to {backend.value}: `baton resume {job}` continues it there")


def _act(ctx: typer.Context, job: str, action: str, as_json: bool) -> None:
    from orchestrator.wire import JobOut

    with connect(ctx) as client:
        found = client.call("POST", f"/api/v1/jobs/{job}/{action}", JobOut)
    if as_json:
        render.print_json(found)
    else:
        render.console.print(render.job_summary(found))
        if action == "pause":
            _say_whether_kaggle_hears(found.spec, action)


def _say_whether_kaggle_hears(spec: dict[str, Any], action: str) -> None:
    """A running Kaggle kernel hears pause and cancel only through its control channel."""
    if spec.get("backend") != "kaggle":
        return
    kaggle = spec.get("kaggle") or {}
    poll = float(kaggle.get("control_poll_seconds", 60.0))
    if kaggle.get("enable_internet") and poll > 0:
        line = (
            f"A running Kaggle session hears the {action} on the job's control channel within "
            f"about {poll:.0f} s if the BATON_KAGGLE_KEY Secret is attached to its kernel; "
            "otherwise it runs on to its limit."
        )
    elif action == "pause":
        line = (
            "A running Kaggle session cannot hear the pause (kaggle.enable_internet is off): the "
            "job pauses when that session ends at its limit."
        )
    else:
        line = (
            "A running Kaggle session cannot hear the cancel (kaggle.enable_internet is off): it "
            "runs on to its limit, spending quota; stop it on its kernel's page on kaggle.com."
        )
    render.console.print(line, markup=False)


def checkpoints(ctx: typer.Context, job: JobArg, as_json: JsonOpt = False) -> None:
    """A job's checkpoints: step, size, digest, and whether its files are still kept (only the
    newest are; a finished job keeps its final one) or were pruned."""
    from orchestrator.wire import CheckpointOut

    with connect(ctx) as client:
        rows = client.call(
            "GET",
            f"/api/v1/jobs/{job}/checkpoints",
            list[CheckpointOut],
            params={"include_pruned": "true"},
        )
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
    from orchestrator.cli.download import download_checkpoint
    from orchestrator.wire import CheckpointOut

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
    from orchestrator.wire import QuotaOut

    with connect(ctx) as client:
        rows = client.call("GET", "/api/v1/quota", list[QuotaOut])
    if as_json:
        render.print_json(rows)
    elif not rows:
        render.console.print("no Kaggle quota to show (no Kaggle credentials or Kaggle jobs)")
    else:
        render.console.print(render.quota_table(rows))


def compare(
    ctx: typer.Context,
    first: Annotated[str, typer.Argument(help="a job id")],
    second: Annotated[str, typer.Argument(help="another job id")],
    metric: Annotated[str, typer.Option(help="which logged scalar")] = "loss",
    as_json: JsonOpt = False,
) -> None:
    """One metric of two jobs side by side, by step (at most 20 steps, the last included)."""
    from orchestrator.wire import JobOut, MetricPoint

    with connect(ctx) as client:
        jobs = [client.call("GET", f"/api/v1/jobs/{job}", JobOut) for job in (first, second)]
        series = [
            client.call("GET", f"/api/v1/jobs/{job}/metrics", list[MetricPoint])
            for job in (first, second)
        ]
    limit = None if as_json else render.COMPARE_ROWS
    rows = render.compare_rows(metric, series[0], series[1], limit=limit)
    if as_json:
        print(json.dumps([{"step": s, first: a, second: b} for s, a, b in rows], indent=2))
        return
    if not rows:
        raise CliError(f"neither job has logged {metric!r} yet")
    names = (f"{jobs[0].name} ({first})", f"{jobs[1].name} ({second})")
    render.console.print(render.compare_table(metric, names, rows))


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
        move,
        checkpoints,
        download,
        quota,
        compare,
    ):
        app.command()(command)
