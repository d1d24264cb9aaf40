"""Apply Alembic migrations: run by `baton serve` and `baton migrate` before anything else."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import orchestrator

# Installed side by side with the orchestrator package, in a checkout and in site-packages alike;
# found by path so that a user's own `migrations` folder can never shadow it.
MIGRATIONS_DIR = Path(orchestrator.__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    command.upgrade(alembic_config(url), "head")
