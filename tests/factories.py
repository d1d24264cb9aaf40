"""Factories for specs, settings and running services, shared by every orchestrator test."""

from __future__ import annotations

import base64
import hashlib
import math
import os
import socket
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import uvicorn
from fastapi.testclient import TestClient
from kagglesdk import KaggleClient, KaggleEnv

from orchestrator.api.main import create_app
from orchestrator.backends.kaggle.backend import kernel_slug
from orchestrator.backends.local.sessions import SessionState, cancel_session, session_state
from orchestrator.config import Settings
from orchestrator.models import utcnow
from orchestrator.reference import run_uninterrupted
from orchestrator.service import build_services, prestart
from orchestrator.spec import JobSpec
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.client import point_at
from tests.support.databases import seed_migrated
from tests.support.supervisors import wait_for_supervisors
from worker.kaggle_access.client import ClientFactory
from worker.kaggle_access.secrets import SECRET_LABEL

# Tests run with their trainers' step time scaled by this (CI also runs the chained tests at 0.5
# and 2): what they assert must hold on a machine twice as fast or twice as slow.
STEP_SCALE = float(os.environ.get("BATON_TEST_STEP_SCALE", "1"))
ADMIN_TOKEN = "bt_test-admin-token-0123456789abcdef"
FAST_TRAINER = "tests.support.trainers:LinearTrainer"
FINISHED = {"succeeded", "failed", "cancelled"}


def job_spec(**overrides: Any) -> dict[str, Any]:
    """A valid spec for the fast test trainer; keyword arguments replace top-level fields."""
    spec: dict[str, Any] = {
        "name": "test-job",
        "backend": "local",
        "trainer": FAST_TRAINER,
        "config": {},
        "total_steps": 50,
        "seed": 7,
        "session": {"limit_seconds": 60, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
        "retry": {"max_failures": 2},
    }
    spec.update(overrides)
    if "step_sleep" in spec["config"]:
        spec["config"] = {**spec["config"], "step_sleep": spec["config"]["step_sleep"] * STEP_SCALE}
    return spec


def guaranteed_segments(spec: dict[str, Any]) -> int:
    """The fewest sessions a chained job can take on any machine: no step is faster than its
    sleep, and no session trains for its whole limit."""
    work = spec["total_steps"] * float(spec["config"].get("step_sleep", 0.0))
    return math.floor(work / spec["session"]["limit_seconds"]) + 1


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "admin_token": ADMIN_TOKEN,
        # Sessions here last seconds: tick twice as often as `baton serve` does by default (an
        # action wakes the loop at once), not more, since each tick costs the test's process CPU
        # that the sessions on the other core need.
        "reconcile_interval_seconds": 0.5,
        # The emulator runs seconds-long sessions: poll it as often as the loop ticks.
        "kaggle_poll_seconds": 0.5,
        "kill_grace_seconds": 2.0,
        # The test trainers live in tests/support.
        "trainer_packages": "trainers,tests",
    }
    values.update(overrides)
    return Settings(**values)


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def running_api(
    settings: Settings,
    *,
    embedded_loop: bool = True,
    kaggle_url: str | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> Iterator[TestClient]:
    """The app with its reconcile loop, after the prestart step, as `baton serve` runs it;
    `clock` is the engine's (a test shares one with the emulator to jump to a quota refresh)."""
    seed_migrated(settings)
    prestart(settings)
    extra = {"kaggle_clients": emulator_clients(kaggle_url)} if kaggle_url else {}
    services = build_services(settings, embedded_loop=embedded_loop, clock=clock, **extra)
    try:
        with TestClient(create_app(services)) as client:
            client.headers.update(auth())
            yield client
    finally:
        services.db.dispose()
        stop_sessions(settings.sessions_dir)


def submit_with_secret(settings: Settings, emulator: Emulator, spec: dict[str, Any]) -> str:
    """Submit `spec` as alice (her Kaggle key stored, nothing launched yet), then attach her key
    to the job's kernel as the Kaggle Secret self-chaining and the in-kernel transport read;
    the job's id. Start the orchestrator afterwards (`running_api`) to run it."""
    with running_api(settings, embedded_loop=False, kaggle_url=emulator.url) as api:
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        submitted = api.post("/api/v1/jobs", json=spec)
        assert submitted.status_code == 201, submitted.text
        job_id: str = submitted.json()["id"]
    emulator.set_secret("alice", SECRET_LABEL, "alice-key")
    emulator.attach_secret(f"alice/{kernel_slug(job_id)}", SECRET_LABEL)
    return job_id


@contextmanager
def live_server(settings: Settings, *, embedded_loop: bool = True) -> Iterator[str]:
    """A real HTTP server on an ephemeral port, as `baton serve` runs it; yields its URL."""
    seed_migrated(settings)
    prestart(settings)
    services = build_services(settings, embedded_loop=embedded_loop)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(services), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a hang guard
    while not server.started:
        assert thread.is_alive(), "server did not start"
        assert time.monotonic() < deadline, "server did not start in time"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()
        services.db.dispose()
        stop_sessions(settings.sessions_dir)


def stop_sessions(sessions_dir: Path, timeout: float = 15) -> None:
    """Sessions outlive the orchestrator by design; a test's must not outlive the test."""
    roots = list(sessions_dir.glob("*")) if sessions_dir.exists() else []
    for root in roots:
        cancel_session(root)
    deadline = time.monotonic() + timeout
    while any(session_state(root) is SessionState.RUNNING for root in roots):
        if time.monotonic() > deadline:
            raise AssertionError("a session outlived its cancellation")
        time.sleep(0.05)
    if wait_for_supervisors(roots, timeout):
        raise AssertionError("a session's supervisor outlived its session")


def wait_for(
    client: TestClient, job_id: str, done: Callable[[dict[str, Any]], bool], timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/api/v1/jobs/{job_id}").json()
        if done(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for job {job_id}: {job}")
        time.sleep(0.25)


def event_kinds(client: TestClient, job_id: str) -> list[str]:
    """The kinds of a job's events, oldest first."""
    return [event["kind"] for event in client.get(f"/api/v1/jobs/{job_id}/events").json()]


def wait_finished(client: TestClient, job_id: str, timeout: float = 240) -> dict[str, Any]:
    return wait_for(client, job_id, lambda job: job["state"] in FINISHED, timeout)


def emulator_clients(url: str) -> ClientFactory:
    """The production client factory's twin: real kagglesdk clients calling the emulator."""

    def factory(username: str, key: str, **kwargs: Any) -> KaggleClient:
        return point_at(
            KaggleClient(env=KaggleEnv.TEST, username=username, password=key, **kwargs), url
        )

    return factory


def kaggle_spec(kaggle: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A Kaggle job for the fast trainer, chaining across 20 s sessions (20 s of training: two
    segments or more, with room for a torch import that takes 10 s on a loaded machine)."""
    spec = job_spec(
        backend="kaggle",
        total_steps=500,
        config={"step_sleep": 0.04},
        session={"limit_seconds": 20, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
        kaggle={"accelerator": "t4x2", "quota_reserve_seconds": 0, **(kaggle or {})},
    )
    spec.update(overrides)
    return spec


def reference_digest(spec: dict[str, Any], workdir: Path) -> str:
    """The model digest of `spec` trained in one uninterrupted local session. Without the test
    trainer's `step_sleep`: it only paces steps (so that sessions run out of time) and never
    touches the model, so the digest is the same, and the yardstick spends no time asleep."""
    local = {key: value for key, value in spec.items() if key not in ("kaggle", "slurm")}
    config = {key: value for key, value in spec.get("config", {}).items() if key != "step_sleep"}
    local |= {"backend": "local", "config": config}
    reference = run_uninterrupted(JobSpec.model_validate(local), workdir)
    assert reference.manifest is not None, reference.problem
    return reference.manifest.model_digest


def require_services() -> bool:
    """In CI (BATON_REQUIRE_SERVICES=1) a missing PostgreSQL or Redis fails instead of skipping."""
    return os.environ.get("BATON_REQUIRE_SERVICES") == "1"


# Emulator timings for tests that talk to it directly: sessions queue, datasets process and fresh
# versions 404 for a fraction of a second.
FAST_EMULATOR = {
    "queue_seconds": 0.2,
    "grace_seconds": 0.5,
    "dataset_processing_seconds": 0.6,
    "dataset_not_found_seconds": 0.2,
}


@contextmanager
def fast_emulator(root: Path, **options: Any) -> Iterator[Emulator]:
    """An emulator with FAST_EMULATOR timings (and `options`) that must end without an internal
    error."""
    with start_emulator(root, **(FAST_EMULATOR | options)) as running:
        yield running
        assert running.internal_errors == []


def wheel_file(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel of one package in `folder` (a folder standing for PyPI, or a
    find-links folder), for pip to install offline: no test reaches the internet."""
    package = name.replace("-", "_")
    info = f"{package}-{version}.dist-info"
    files = {
        f"{package}/__init__.py": f'VERSION = "{version}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: baton-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{path},sha256={encoded},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{package}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel
