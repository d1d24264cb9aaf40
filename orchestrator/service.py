"""Wires the parts together for one orchestrator process: database, backends, engine, loop.

`Services` is what the API, Celery tasks and the CLI's server commands share; it lives here,
below the web layer, so that none of them imports orchestrator/api/ to get it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from anyio import CapacityLimiter

from orchestrator.auth import ensure_admin_token
from orchestrator.auth_throttle import FailureThrottle
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.registry import Backends
from orchestrator.backends.slurm.backend import SlurmSite
from orchestrator.backends.slurm.commands import SlurmCommands, SlurmJobs
from orchestrator.celery_app import CeleryNudger, make_app
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.engine.reconcile_loop import ReconcileLoop
from orchestrator.metrics import CountingBackends
from orchestrator.migrate import upgrade
from orchestrator.models import Job, utcnow
from orchestrator.notifier import Deliveries, NotifierLoop
from orchestrator.private_files import make_private, sqlite_file
from orchestrator.quota_cache import QuotaCache
from orchestrator.secret_box import SecretBox, load_secret_box
from orchestrator.trainer_lookup import TrainerFinder
from orchestrator.webhook_client import WebhookClient
from worker.kaggle_access.client import ClientFactory, production_client


@dataclass
class Services:
    settings: Settings
    db: Database
    engine: Engine
    loop: ReconcileLoop | None
    # Encrypts and decrypts stored credentials (orchestrator/credentials.py).
    secret_box: SecretBox
    # Checks a submitted trainer without importing it (orchestrator/trainer_lookup.py).
    trainers: TrainerFinder
    # At scale: sends a Celery reconcile for (job id, backend) (orchestrator/celery_app.py).
    enqueue: Callable[[str, str], None] | None = None
    # Sends webhook notifications on its own thread (orchestrator/notifier.py).
    notifier: NotifierLoop | None = None
    # The Kaggle quota last seen per user, for ETAs (orchestrator/quota_cache.py).
    quota_seen: QuotaCache = field(default_factory=QuotaCache)
    # Threads for requests that wait on Kaggle, apart from the few (BATON_API_THREADS) that serve
    # the database: a slow Kaggle must not stall every other request.
    outbound_calls: CapacityLimiter = field(default_factory=lambda: CapacityLimiter(16))
    # Failed authentications per client address (API and sign-in): 429 past the burst.
    auth_failures: FailureThrottle = field(default_factory=FailureThrottle)

    def nudge(self, job: Job) -> None:
        """After a commit: have the job looked at now rather than on the next tick."""
        if self.loop is not None:
            self.loop.wake()
        if self.enqueue is not None:
            self.enqueue(job.id, job.backend)


def build_backends(
    settings: Settings, db: Database, box: SecretBox, kaggle_clients: ClientFactory
) -> Backends:
    local = LocalBackend(
        settings.sessions_dir,
        python=settings.worker_python,
        warm_start=settings.local_warm_start,
        trainer_paths=settings.trainer_path_dirs,
        grace_seconds=settings.kill_grace_seconds,
        slots=settings.local_slots,
        poll_seconds=settings.reconcile_interval_seconds,
    )
    return Backends(
        local,
        db,
        box,
        settings.data_dir / "kaggle",
        kaggle_clients,
        kaggle_timeout=settings.kaggle_call_timeout_seconds,
        kaggle_poll=settings.kaggle_poll_seconds,
        trainer_paths=settings.trainer_path_dirs,
        slurm=SlurmSite(
            settings.resolved_slurm_sessions_dir,
            SlurmJobs(SlurmCommands()),
            python=settings.worker_python,
            trainer_paths=settings.trainer_path_dirs,
            poll_seconds=settings.slurm_poll_seconds,
        ),
    )


def build_webhook_client(settings: Settings) -> WebhookClient:
    return WebhookClient(settings.webhook_networks, settings.webhook_deadline_seconds)


def build_notifier(settings: Settings, db: Database) -> NotifierLoop:
    deliveries = Deliveries(settings.webhook_concurrency, settings.webhook_per_user)
    return NotifierLoop(
        db, settings.notify_interval_seconds, build_webhook_client(settings), deliveries
    )


def build_secret_box(settings: Settings) -> SecretBox:
    """The box over BATON_SECRET_KEYS, or over data_dir/secret.key (made on first use) if unset."""
    configured = (
        settings.secret_keys.get_secret_value() if settings.secret_keys is not None else None
    )
    return load_secret_box(configured, settings.secret_key_file)


def prestart(settings: Settings) -> None:
    """Make the data dir (private: 0700, umask 077), check the secret keys, apply migrations,
    make sure of an admin token."""
    if settings.secret_keys is not None:
        # A bad BATON_SECRET_KEYS fails before anything is created, with an error naming it.
        build_secret_box(settings)
    make_private(settings.data_dir, sqlite_file(settings.resolved_database_url))
    build_secret_box(settings)  # with no keys set, this makes data_dir/secret.key once
    upgrade(settings.resolved_database_url)
    db = Database(settings.resolved_database_url)
    try:
        with db.transaction() as session:
            admin = settings.admin_token.get_secret_value() if settings.admin_token else None
            ensure_admin_token(session, admin, settings.admin_token_file)
    finally:
        db.dispose()


def build_services(
    settings: Settings,
    *,
    embedded_loop: bool | None = None,
    kaggle_clients: ClientFactory = production_client,
    clock: Callable[[], datetime] = utcnow,
) -> Services:
    """`kaggle_clients` is the one seam to Kaggle; tests point it at the emulator. `clock` is
    the engine's "now" (waits, polls, quota refreshes); tests share one with the emulator.

    The embedded loop runs unless BATON_RECONCILER=celery hands reconciling to Celery workers
    and beat; then user actions are sent to them as nudges instead.
    """
    if embedded_loop is None:
        embedded_loop = settings.reconciler == "embedded"
    db = Database(settings.resolved_database_url)
    box = build_secret_box(settings)
    backends = build_backends(settings, db, box, kaggle_clients)
    engine = Engine(
        db,
        CountingBackends(backends),
        settings.checkpoints_dir,
        clock=clock,
        keep_checkpoints=settings.keep_checkpoints,
        lease_seconds=settings.claim_lease_seconds,
        trackers_dir=settings.trackers_dir,
        allow_local_fallback=settings.allow_local_fallback,
    )
    loop = ReconcileLoop(engine, settings.reconcile_interval_seconds) if embedded_loop else None
    enqueue = None
    if settings.reconciler == "celery":
        enqueue = CeleryNudger(make_app(settings), settings.local_host)
    return Services(
        settings=settings,
        db=db,
        engine=engine,
        loop=loop,
        secret_box=box,
        trainers=build_trainer_finder(settings),
        enqueue=enqueue,
        # Beside the embedded loop; with Celery, beat calls deliver_due_notifications instead.
        notifier=build_notifier(settings, db) if embedded_loop else None,
    )


def build_trainer_finder(settings: Settings) -> TrainerFinder:
    """Search the trainer paths, then where sessions run from (their PYTHONPATH), then ours."""
    search = [str(path) for path in settings.trainer_path_dirs]
    return TrainerFinder(settings.allowed_trainer_packages, [*search, os.getcwd(), *sys.path])
