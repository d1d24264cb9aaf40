"""`baton slurm check`: the preflight a user runs once from the submit host of their cluster.

A thin command: the checks live in orchestrator/backends/slurm/preflight.py. It uses the Slurm
commands of this host (SLURM_CONF as they see it) and BATON_SLURM_SESSIONS_DIR, the directory
segments will use, which must be on a filesystem the compute nodes share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import render

slurm_app = typer.Typer(help="Slurm: check what a segment will meet on this cluster.")


@slurm_app.command("check")
def check(
    partition: Annotated[str | None, typer.Option(help="default: the cluster's default")] = None,
    account: Annotated[str | None, typer.Option(help="the account to charge")] = None,
    qos: Annotated[str | None, typer.Option(help="the QOS to ask for")] = None,
    directory: Annotated[
        Path | None,
        typer.Option(help="where segments' sessions go; default: BATON_SLURM_SESSIONS_DIR"),
    ] = None,
) -> None:
    """Submit one 30 s job (a one-minute allocation) and report the partition's limits, the
    queue wait, the end time the job reads, the --signal delivery, and whether the filesystem
    is shared between this host and the node."""
    from pydantic import ValidationError

    from orchestrator.backends.slurm.commands import SlurmCommands, SlurmJobs
    from orchestrator.backends.slurm.preflight import run_check
    from orchestrator.config import Settings
    from orchestrator.spec import SlurmSpec

    try:
        options = SlurmSpec(partition=partition, account=account, qos=qos)
    except ValidationError as exc:
        field = ".".join(str(part) for part in exc.errors()[0]["loc"])
        render.console.print(f"[red]--{field}: {exc.errors()[0]['msg']}[/]")
        raise typer.Exit(2) from None
    workdir = directory or Settings().resolved_slurm_sessions_dir
    render.console.print(f"submitting a {60} s allocation to probe it (about a minute)...")
    report = run_check(SlurmJobs(SlurmCommands()), workdir, options)
    render.console.print(render.preflight_table(report))
    if not report.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(slurm_app, name="slurm")
