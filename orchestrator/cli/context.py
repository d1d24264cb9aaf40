"""What every remote command needs: the server URL chosen at the top level, and a client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from orchestrator.cli.settings import resolve_token, resolve_url

if TYPE_CHECKING:
    from orchestrator.cli.client import BatonClient


@dataclass
class CliOptions:
    url: str | None = None


@contextmanager
def connect(ctx: typer.Context) -> Iterator[BatonClient]:
    # Here, not at the top: the HTTP client and pydantic load only for a command that calls.
    from orchestrator.cli.client import BatonClient

    options = ctx.find_object(CliOptions) or CliOptions()
    client = BatonClient(resolve_url(options.url), resolve_token())
    try:
        yield client
    finally:
        client.close()
