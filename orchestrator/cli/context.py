"""What every remote command needs: the server URL chosen at the top level, and a client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import typer

from orchestrator.cli.client import BatonClient
from orchestrator.cli.settings import resolve_token, resolve_url


@dataclass
class CliOptions:
    url: str | None = None


@contextmanager
def connect(ctx: typer.Context) -> Iterator[BatonClient]:
    options = ctx.find_object(CliOptions) or CliOptions()
    client = BatonClient(resolve_url(options.url), resolve_token())
    try:
        yield client
    finally:
        client.close()
