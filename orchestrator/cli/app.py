"""The `baton` Typer app: global options, the command modules, and error handling at the edge.

Every command module is cheap to import: anything from the server side (the API, the database,
the engine, Kaggle, Celery, uvicorn) is imported inside the command that needs it, so that
`baton --help` and `baton jobs` start at once (benchmarks/cli_latency.py; import-linter and
ruff's TID253 in pyproject.toml keep it so).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from orchestrator.cli import account, jobs, kaggle, server, slurm, workers
from orchestrator.cli.context import CliOptions
from orchestrator.cli.errors import CliError

app = typer.Typer(
    name="baton",
    help="Serve the Baton orchestrator, and drive its training jobs over the REST API.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        # Read from the installed package's metadata, here: it loads in about 20 ms.
        from importlib.metadata import version

        print(f"baton {version('baton')}")
        raise typer.Exit()


@app.callback()
def _options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(help="API base URL [default: $BATON_URL, the config file, or :8000]"),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="print the version and exit"
        ),
    ] = False,
) -> None:
    ctx.obj = CliOptions(url=url)


# Each command module adds its commands in one line (`scale` adds worker/beat the same way).
for module in (server, jobs, account, workers, kaggle, slurm):
    module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run a command; a user's problem ends in one line on stderr and a non-zero exit."""
    # Make trainers in the current directory importable, after Baton's own packages.
    sys.path.append(os.getcwd())
    try:
        app(args=argv, prog_name="baton")  # Typer's standalone mode always ends in SystemExit
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        raise
    except CliError as exc:
        raise SystemExit(str(exc)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
