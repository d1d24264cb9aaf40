"""`baton serve` binds its port before anything else: a second server whose port is taken exits
with one clear line and never touches a job. `--workers N` pre-forks API processes on that port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN, job_spec
from tests.support.ports import free_port


def test_a_taken_port_stops_serve_before_its_reconcile_loop_starts(
    api: TestClient, settings: Settings
) -> None:
    job_id = api.post("/api/v1/jobs", json=job_spec()).json()["id"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "BATON_DATA_DIR": str(settings.data_dir),
            "BATON_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        baton = Path(sys.executable).parent / "baton"
        ran = subprocess.run(
            [str(baton), "serve", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert ran.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "queued"
    assert api.get(f"/api/v1/jobs/{job_id}/segments").json() == []


def _serve_env(data_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "BATON_DATA_DIR": str(data_dir),
        "BATON_DATABASE_URL": database_url,
        "BATON_ADMIN_TOKEN": ADMIN_TOKEN,
        **extra,
    }


def test_several_api_processes_need_the_celery_reconciler(tmp_path: Path) -> None:
    """Each process would run its own embedded loop: refused with one line, before binding."""
    baton = Path(sys.executable).parent / "baton"
    ran = subprocess.run(
        [str(baton), "serve", "--port", "0", "--workers", "2"],
        env=_serve_env(tmp_path / "data", f"sqlite:///{tmp_path / 'baton.db'}"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode != 0
    assert "--workers above 1 needs BATON_RECONCILER=celery" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "baton.db").exists()


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_pre_forked_api_serves_from_every_process_and_survives_losing_one(
    tmp_path: Path, database_url: str
) -> None:
    """`baton serve --workers 2` (as docker-compose.yml runs it): the processes share the one
    port; one killed with -9 is replaced while the other keeps answering; SIGTERM stops all."""
    port = free_port()
    env = _serve_env(
        tmp_path / "data",
        database_url,
        BATON_RECONCILER="celery",
        BATON_TRAINER_PACKAGES="trainers,tests",
        BATON_BROKER_URL="redis://127.0.0.1:1/0",  # nudges fail fast and are only hints
    )
    baton = Path(sys.executable).parent / "baton"
    server = subprocess.Popen(
        [str(baton), "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def processes() -> list[psutil.Process]:
        """The API processes (not multiprocessing's helper, not a killed one not yet reaped)."""
        found = []
        for child in psutil.Process(server.pid).children():
            try:
                if "resource_tracker" not in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.ZombieProcess:
                continue
        return found

    try:
        _wait_until(ready, "the API")
        _wait_until(lambda: len(processes()) == 2, "two API processes")
        job = httpx.post(f"{url}/api/v1/jobs", json=job_spec(), headers=headers, timeout=30)
        assert job.status_code == 201
        job_url = f"{url}/api/v1/jobs/{job.json()['id']}"
        answers = [httpx.get(job_url, headers=headers, timeout=30) for _ in range(20)]
        assert {answer.status_code for answer in answers} == {200}
        first = processes()[0]
        first.kill()
        assert httpx.get(job_url, headers=headers, timeout=30).status_code == 200
        _wait_until(
            lambda: len(processes()) == 2 and first.pid not in {p.pid for p in processes()},
            "a replacement API process",
        )
        assert httpx.get(job_url, headers=headers, timeout=30).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0
    assert not ready()
