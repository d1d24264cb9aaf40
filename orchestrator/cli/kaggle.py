"""`baton kaggle check`: the preflight a user runs once on their own Kaggle account.

A thin command: the checks live in orchestrator/backends/kaggle/preflight.py. It runs here, with
the credentials given here, and stores what it learned in this Baton's data directory, where
the Kaggle backend reads it for jobs on that account.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import render
from orchestrator.cli.account import _read_key

kaggle_app = typer.Typer(help="Kaggle: check what works on your account.")


@kaggle_app.command("check")
def check(
    username: Annotated[str, typer.Option(help="your Kaggle user name")],
    key_file: Annotated[
        Path | None,
        typer.Option(help="a file holding the API key or token; default: read stdin"),
    ] = None,
    gpu: Annotated[
        bool,
        typer.Option(
            "--gpu",
            help="also push one T4 x2 kernel (at most 60 s, about a minute of GPU quota): "
            "can this account run GPU and internet-enabled kernels (phone verification)?",
        ),
    ] = False,
) -> None:
    """Check your Kaggle account with CPU kernels and tiny datasets only (no GPU quota).

    Takes a few minutes; it deletes what it creates and stores its findings for Baton. With
    --gpu, one short T4 x2 kernel too.
    """
    # The Kaggle client and the preflight load only for this command.
    from orchestrator.backends.kaggle.findings import AccountFindings
    from orchestrator.backends.kaggle.preflight import GPU_COST_NOTICE, Preflight
    from orchestrator.config import Settings
    from worker.kaggle_access.client import KaggleAccount

    settings = Settings()
    account = KaggleAccount(username, _read_key(key_file), timeout_seconds=60)
    findings = AccountFindings.for_account(settings.data_dir / "kaggle", username)
    if gpu:
        render.console.print(GPU_COST_NOTICE)
    report = Preflight(account, findings, gpu=gpu).run()
    render.console.print(render.preflight_table(report))
    if not report.passed:
        raise typer.Exit(1)
    render.console.print(f"findings stored in {findings.path}")


def register(app: typer.Typer) -> None:
    app.add_typer(kaggle_app, name="kaggle")
