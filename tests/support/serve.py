"""`baton serve` as a real process on a free port, for tests that watch the process itself
(its memory, its exit on SIGTERM)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN
from tests.support.hostile_receivers import wait_until
from tests.support.ports import free_port


@contextmanager
def baton_serve(
    settings: Settings, log: Path, **extra: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Yields the server's URL and process; killed at the end if still running."""
    port = free_port()
    env = {
        **os.environ,
        "BATON_DATA_DIR": str(settings.data_dir),
        "BATON_DATABASE_URL": settings.resolved_database_url,
        "BATON_ADMIN_TOKEN": ADMIN_TOKEN,
        "BATON_TRAINER_PACKAGES": "trainers,tests",
        # Its live-server record (orchestrator/cli/live_server.py) stays in the test's tree.
        "XDG_STATE_HOME": str(log.parent / "state"),
        **extra,
    }
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "baton"), "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return server.poll() is not None

    try:
        wait_until(ready, "baton serve", 90)
        assert server.poll() is None, log.read_text()[-3000:]
        yield url, server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
