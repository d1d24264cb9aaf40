"""`baton worker` and `baton beat`: Celery workers and beat, for BATON_RECONCILER=celery."""

from __future__ import annotations

import socket
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import operator_errors

if TYPE_CHECKING:
    from orchestrator.config import Settings

# Celery, Redis and the config are imported inside each command: the rest of the CLI never
# loads them.

# The in-memory scheduler: its one entry is an interval, and a beat killed mid-write leaves no
# schedule file behind to trip over.
BEAT_ARGV = ["beat", "--scheduler=celery.beat:Scheduler", "--loglevel=INFO"]


def worker_argv(
    settings: Settings,
    concurrency: int,
    local: bool,
    name: str = "baton",
    notifications: bool = False,
) -> list[str]:
    """Threads, not forked children: a reconcile mostly waits on the database and backends,
    and one process per worker means a killed worker leaves no orphan holding a message.
    A notifications worker serves webhook deliveries only, so a receiver never holds an engine
    worker."""
    from orchestrator.celery_app import NOTIFY_QUEUE, SHARED_QUEUE, local_queue

    queues = [SHARED_QUEUE] + ([local_queue(settings.local_host)] if local else [])
    if notifications:
        queues = [NOTIFY_QUEUE]
    return [
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        f"--queues={','.join(queues)}",
        f"--hostname={name}@{socket.gethostname()}",
        "--loglevel=INFO",
        "--without-mingle",
        "--without-gossip",
    ]


def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="jobs reconciled at once")] = 2,
    local: Annotated[
        bool,
        typer.Option(
            "--local/--no-local",
            help="also drive this host's local sessions (it must be BATON_LOCAL_HOST)",
        ),
    ] = True,
    metrics_port: Annotated[
        int, typer.Option(min=0, max=65535, help="serve this worker's /metrics here (0: off)")
    ] = 0,
    name: Annotated[
        str, typer.Option(help="node name, unique per host (NAME@host in `celery inspect`)")
    ] = "baton",
    notifications: Annotated[
        bool,
        typer.Option(
            "--notifications",
            help="deliver webhook notifications only (their own queue; run one such worker)",
        ),
    ] = False,
) -> None:
    """Run a Celery worker that reconciles the jobs beat fans out (or, with --notifications,
    one that delivers webhooks)."""
    from prometheus_client import start_http_server

    from orchestrator.config import Settings
    from orchestrator.metrics import process_registry

    settings = Settings()
    if notifications:
        local = False
    if local and settings.local_host != socket.gethostname():
        raise SystemExit(
            f"this host is {socket.gethostname()}, but BATON_LOCAL_HOST is {settings.local_host}: "
            "only workers on that host may drive local sessions (or pass --no-local)"
        )
    with operator_errors():
        from orchestrator.tasks import app  # builds the Celery app from the environment

        if metrics_port:
            start_http_server(metrics_port, registry=process_registry())
        app.worker_main(worker_argv(settings, concurrency, local, name, notifications))


def beat(
    check: Annotated[
        bool, typer.Option("--check", help="exit 0 if a fan-out ran recently, else 1")
    ] = False,
    max_age: Annotated[float, typer.Option(min=1, help="seconds, for --check")] = 60.0,
) -> None:
    """Run Celery beat: every BATON_BEAT_INTERVAL_SECONDS it fans out the jobs due."""
    from orchestrator.config import Settings

    settings = Settings()
    if check:
        raise typer.Exit(check_fan_out(settings, max_age))
    with operator_errors():
        from orchestrator.tasks import app

        app.start(BEAT_ARGV)


def check_fan_out(settings: Settings, max_age: float) -> int:
    """Healthy while fan-outs keep happening: beat sends them and a worker runs them."""
    import redis

    from orchestrator.celery_app import DispatchGuard

    try:
        client = redis.Redis.from_url(settings.broker_url)
        last = DispatchGuard(client, settings.dispatch_guard_seconds).last_fan_out()
    except redis.RedisError as exc:
        print(f"broker unreachable: {exc}", file=sys.stderr)
        return 1
    if last is None or time.time() - last > max_age:
        print(f"no fan-out in the last {max_age:g} s", file=sys.stderr)
        return 1
    return 0


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(beat)
