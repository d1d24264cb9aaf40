"""The `baton` command line (Typer + Rich)."""

from orchestrator.cli.app import main

__all__ = ["main"]
