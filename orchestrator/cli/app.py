"""The `baton` Typer app: global options, the command modules, and error handling at the edge."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from orchestrator.auth import WeakAdminToken
from orchestrator.cli import account, jobs, kaggle, server, workers
from orchestrator.cli.context import CliOptions
from orchestrator.cli.errors import CliError
from orchestrator.secret_box import SecretBoxError

app = typer.Typer(
    name="baton",
    help="Serve the Baton orchestrator, and drive its training jobs over the REST API.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def _options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(help="API base URL [default: $BATON_URL, the config file, or :8000]"),
    ] = None,
) -> None:
    ctx.obj = CliOptions(url=url)


# Each command module adds its commands in one line (`scale` adds worker/beat the same way).
for module in (server, jobs, account, workers, kaggle):
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
    except (SecretBoxError, WeakAdminToken) as exc:
        # A key problem is the operator's to fix; the message names the setting, not a value.
        raise SystemExit(f"baton: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
