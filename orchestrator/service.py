"""Wires the parts together for one orchestrator process: database, backends, engine, loop."""

from __future__ import annotations

from orchestrator.api.deps import Services
from orchestrator.auth import ensure_admin_token
from orchestrator.backends.base import Backend
from orchestrator.backends.local import LocalBackend
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.migrate import upgrade
from orchestrator.reconciler import ReconcileLoop


def build_backends(settings: Settings) -> dict[str, Backend]:
    return {
        "local": LocalBackend(
            settings.sessions_dir,
            python=settings.worker_python,
            grace_seconds=settings.kill_grace_seconds,
        )
    }


def prestart(settings: Settings) -> None:
    """Create the data dir, apply migrations, make sure an admin token exists."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    db = Database(settings.resolved_database_url)
    try:
        with db.transaction() as session:
            admin = settings.admin_token.get_secret_value() if settings.admin_token else None
            ensure_admin_token(session, admin, settings.admin_token_file)
    finally:
        db.dispose()


def build_services(settings: Settings, *, embedded_loop: bool = True) -> Services:
    db = Database(settings.resolved_database_url)
    engine = Engine(db, build_backends(settings), settings.checkpoints_dir)
    loop = ReconcileLoop(engine, settings.reconcile_interval_seconds) if embedded_loop else None
    return Services(settings=settings, db=db, engine=engine, loop=loop)
