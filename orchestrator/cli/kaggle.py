"""`baton kaggle check`: the preflight a user runs once on their own Kaggle account.

A thin command: the checks live in orchestrator/backends/kaggle/preflight.py. It runs here, with
the credentials given here, and stores what it learned in this Baton's data directory, where
the Kaggle backend reads it for jobs on that account.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli import render
from orchestrator.cli.account import _read_key

if TYPE_CHECKING:
    from rich.table import Table

    from orchestrator.backends.kaggle.preflight import Report

kaggle_app = typer.Typer(help="Kaggle: check what works on your account.")


def report_table(report: Report) -> Table:
    from rich.table import Table

    from orchestrator.backends.kaggle.preflight import Outcome

    style = {Outcome.OK: "green", Outcome.WARN: "yellow", Outcome.FAIL: "red"}
    table = Table("check", "result", "detail")
    for check in report.checks:
        table.add_row(check.name, f"[{style[check.outcome]}]{check.outcome}[/]", check.detail)
    return table


@kaggle_app.command("check")
def check(
    username: Annotated[str, typer.Option(help="your Kaggle user name")],
    key_file: Annotated[
        Path | None,
        typer.Option(help="a file holding the API key or token; default: read stdin"),
    ] = None,
) -> None:
    """Check your Kaggle account with CPU kernels and tiny datasets only (no GPU quota).

    Takes a few minutes; it deletes what it creates and stores its findings for Baton.
    """
    # The Kaggle client and the preflight load only for this command.
    from orchestrator.backends.kaggle.findings import AccountFindings
    from orchestrator.backends.kaggle.preflight import Preflight
    from orchestrator.config import Settings
    from worker.kaggle_access.client import KaggleAccount

    settings = Settings()
    account = KaggleAccount(username, _read_key(key_file), timeout_seconds=60)
    findings = AccountFindings.for_account(settings.data_dir / "kaggle", username)
    report = Preflight(account, findings).run()
    render.console.print(report_table(report))
    if not report.passed:
        raise typer.Exit(1)
    render.console.print(f"findings stored in {findings.path}")


def register(app: typer.Typer) -> None:
    app.add_typer(kaggle_app, name="kaggle")
