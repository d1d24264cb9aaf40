"""`python -m tests.scale.processes ROLE`: the API, a Celery worker or beat, as real processes.

The same entry points `baton serve|worker|beat` use, plus the one seam a test needs: the
Kaggle client pointed at the emulator (`--kaggle-url`). Everything else comes from BATON_*.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp
from uvicorn.supervisors import Multiprocess

from orchestrator.api.main import create_app
from orchestrator.config import Settings
from orchestrator.service import build_services, prestart
from tests.factories import emulator_clients
from worker.kaggle_access.client import ClientFactory

_KAGGLE_URL = "BATON_TEST_KAGGLE_URL"
# The load benchmark's breakdown mode (benchmarks/breakdown.py): where each request's time went.
_BREAKDOWN_DIR = "BATON_BREAKDOWN_DIR"


def api_app(clients: ClientFactory) -> ASGIApp:
    services = build_services(Settings(), kaggle_clients=clients)
    app: ASGIApp = create_app(services)
    if os.environ.get(_BREAKDOWN_DIR):
        from benchmarks import breakdown

        app = breakdown.install(app, services.db.engine, Path(os.environ[_BREAKDOWN_DIR]))
    return app


def emulator_app() -> ASGIApp:
    """One process of a pre-forked API whose Kaggle client talks to the emulator."""
    return api_app(emulator_clients(os.environ[_KAGGLE_URL]))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["api", "worker", "notifier", "beat"])
    parser.add_argument("--kaggle-url", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="baton")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="API processes (pre-fork)")
    args = parser.parse_args(argv)
    settings = Settings()
    clients = emulator_clients(args.kaggle_url)
    if args.role == "api":
        prestart(settings)
        if args.workers == 1:
            uvicorn.run(api_app(clients), host="127.0.0.1", port=args.port, log_level="warning")
            return
        # As `baton serve --workers N`: each spawned process builds its own app.
        os.environ[_KAGGLE_URL] = args.kaggle_url
        config = uvicorn.Config(
            "tests.scale.processes:emulator_app",
            factory=True,
            host="127.0.0.1",
            port=args.port,
            workers=args.workers,
            log_level="warning",
        )
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    from orchestrator import tasks
    from orchestrator.cli.workers import BEAT_ARGV, worker_argv

    if args.role == "worker":
        tasks.use_kaggle_clients(clients)
        tasks.app.worker_main(worker_argv(settings, args.concurrency, True, args.name))
    elif args.role == "notifier":
        argv = worker_argv(settings, args.concurrency, False, args.name, notifications=True)
        tasks.app.worker_main(argv)
    else:
        tasks.app.start(BEAT_ARGV)


if __name__ == "__main__":
    main(sys.argv[1:])
