"""Baton at scale as real processes, for tests and the load benchmark.

Its own redis-server on an ephemeral port (restarting it disturbs nobody else), a fresh
PostgreSQL schema on this machine's server, and the API, Celery workers and beat started through
`tests.scale.processes` in the process layout docker-compose.yml describes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from cryptography.fernet import Fernet

from tests.factories import ADMIN_TOKEN, require_services, stop_sessions
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.databases import enter_postgres, postgres_schema
from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def _wait(condition_met: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition_met():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


class RedisServer:
    """A private redis-server, in memory only, like this machine's (no RDB, no AOF)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # fmt: off
        argv = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.workdir),
        ]
        # fmt: on
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        _wait(answers, "redis-server", 30)
        client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        """Killed and started again: every queued message and key is gone."""
        self.kill()
        self.start()
        self.restarts += 1


class Cluster:
    """The API, workers and beat as separate processes sharing one data dir and database."""

    def __init__(
        self,
        root: Path,
        database_url: str,
        broker_url: str,
        kaggle_url: str,
        workers: int = 2,
        api_workers: int = 1,
        notifier: bool = False,
        **settings: str,
    ) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.api_port = free_port()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "BATON_DATA_DIR": str(root / "data"),
            "BATON_DATABASE_URL": database_url,
            "BATON_BROKER_URL": broker_url,
            "BATON_RECONCILER": "celery",
            "BATON_ADMIN_TOKEN": ADMIN_TOKEN,
            "BATON_SECRET_KEYS": Fernet.generate_key().decode(),
            "BATON_TRAINER_PACKAGES": "trainers,tests",
            "BATON_KILL_GRACE_SECONDS": "2",
            **settings,
        }
        common = [sys.executable, "-m", "tests.scale.processes"]
        self.commands = {
            "api": [
                *common,
                "api",
                "--kaggle-url",
                kaggle_url,
                "--port",
                str(self.api_port),
                "--workers",
                str(api_workers),
            ],
            "beat": [*common, "beat", "--kaggle-url", kaggle_url],
        }
        for index in range(1, workers + 1):
            self.commands[f"worker-{index}"] = [
                *common,
                "worker",
                "--kaggle-url",
                kaggle_url,
                "--name",
                f"w{index}",
            ]
        if notifier:  # a worker for webhook deliveries only
            self.commands["notifier"] = [*common, "notifier", "--kaggle-url", kaggle_url]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills: dict[str, int] = dict.fromkeys(self.commands, 0)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, role: str) -> None:
        with open(self.logs / f"{role}.log", "ab") as log:
            self.procs[role] = subprocess.Popen(
                self.commands[role],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_all(self) -> None:
        self.start("api")  # runs the prestart (migrations) before the others use the database
        self.wait_for_api()
        for role in self.commands:
            if role != "api":
                self.start(role)

    def wait_for_api(self, timeout: float = 60) -> None:
        def healthy() -> bool:
            try:
                return httpx.get(f"{self.api_url}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        _wait(healthy, "the API's /healthz", timeout)

    def kill(self, role: str) -> None:
        """kill -9: no shutdown handler runs, unacked messages stay with the broker. The API's
        whole process group goes, as a container would: a pre-forked API's processes too."""
        proc = self.procs.pop(role)
        if role == "api":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills[role] += 1

    def stop_all(self) -> None:
        for role in list(self.procs):
            self.kill(role)

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=30,
        )

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}"
            for path in sorted(self.logs.glob("*.log"))
        )


@dataclass
class ScaleRig:
    cluster: Cluster
    redis: RedisServer
    emulator: Emulator
    database_url: str


@contextmanager
def started_rig(
    root: Path, emulator_options: dict[str, Any], notifier: bool = False, **settings: str
) -> Iterator[ScaleRig]:
    """Started: API, two engine workers and beat (and a notifications worker with `notifier`),
    on their own Redis, PostgreSQL schema and Kaggle emulator. Skips where redis-server or
    PostgreSQL is missing, and fails instead in CI (BATON_REQUIRE_SERVICES=1)."""
    if shutil.which("redis-server") is None:
        if require_services():
            raise FileNotFoundError("redis-server is required (BATON_REQUIRE_SERVICES=1)")
        pytest.skip("redis-server not installed")
    with ExitStack() as stack:
        database_url = enter_postgres(stack, postgres_schema)
        emulator = stack.enter_context(start_emulator(root / "kaggle", **emulator_options))
        redis = RedisServer(root / "redis")
        stack.callback(redis.kill)
        redis.start()
        cluster = Cluster(
            root / "cluster", database_url, redis.url, emulator.url, notifier=notifier, **settings
        )
        stack.callback(stop_sessions, cluster.root / "data" / "sessions")
        stack.callback(cluster.stop_all)
        cluster.start_all()
        yield ScaleRig(cluster, redis, emulator, database_url)
