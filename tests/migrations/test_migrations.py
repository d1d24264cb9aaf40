"""Alembic on SQLite and PostgreSQL: up from empty to the models' schema, one step down and up.

The `empty_database_url` fixture gives an empty SQLite file, or a fresh schema on this machine's
PostgreSQL (its search_path set through the URL).
"""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from orchestrator.migrate import alembic_config, upgrade
from orchestrator.models import Base


def _state(url: str) -> tuple[str | None, set[str], list[object]]:
    """The stamped revision, the tables, and how the schema differs from the models."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            revision = context.get_current_revision()
            tables = set(inspect(connection).get_table_names()) - {"alembic_version"}
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    return revision, tables, differences


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def test_upgrade_from_empty_gives_the_models_schema(empty_database_url: str) -> None:
    assert _state(empty_database_url)[:2] == (None, set())
    upgrade(empty_database_url)
    revision, tables, differences = _state(empty_database_url)
    assert revision == _head()
    assert tables == set(Base.metadata.tables)
    assert differences == []


def test_one_step_down_and_up_again(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    config = alembic_config(empty_database_url)
    script = ScriptDirectory.from_config(config)
    head = script.get_revision(_head())
    command.downgrade(config, "-1")
    revision, _, differences = _state(empty_database_url)
    assert revision == head.down_revision
    assert differences, "one step down should undo the head migration's schema change"
    upgrade(empty_database_url)
    assert _state(empty_database_url) == (head.revision, set(Base.metadata.tables), [])


def test_every_step_goes_down_to_empty_and_back(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    config = alembic_config(empty_database_url)
    command.downgrade(config, "base")
    assert _state(empty_database_url)[:2] == (None, set())
    upgrade(empty_database_url)
    assert _state(empty_database_url) == (_head(), set(Base.metadata.tables), [])
