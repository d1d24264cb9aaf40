"""Starts and stops an emulator: the HTTP server thread, a reconcile ticker, and cleanup."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kagglesdk import KaggleClient

from tests.kaggle_emulator.accelerators import Accelerator
from tests.kaggle_emulator.calls import Call
from tests.kaggle_emulator.client import emulator_client
from tests.kaggle_emulator.datasets import Dataset
from tests.kaggle_emulator.faults import Faults
from tests.kaggle_emulator.kernel_sessions import KernelSession
from tests.kaggle_emulator.links import KAGGLE, ORCHESTRATOR, LinkCounters
from tests.kaggle_emulator.options import EmulatorOptions
from tests.kaggle_emulator.runner import SessionRunner, SupervisedRunner
from tests.kaggle_emulator.server import EmulatorHTTPServer
from tests.kaggle_emulator.state import EmulatorState

if TYPE_CHECKING:
    from tests.kaggle_emulator.kaggle_api import EmulatorKaggleApi

_STOP_WAIT_SECONDS = 10.0


class Emulator:
    def __init__(
        self, root: Path, options: EmulatorOptions, runner: SessionRunner | None = None
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        session_tokens: dict[int, str] = {}
        self._runner = runner or SupervisedRunner(
            options.python,
            options.repo_root,
            options.grace_seconds,
            options.boot_seconds,
            session_tokens,
        )
        self.state = EmulatorState(root, options, self._runner, session_tokens)
        self._server = EmulatorHTTPServer((options.host, options.port), self.state)
        self.port: int = self._server.server_address[1]
        self.url = f"http://localhost:{self.port}"
        # Running kernels reach the API over Kaggle's own network: a port of their own, so that
        # what crosses the orchestrator's link is counted apart (links.py).
        self._inside = EmulatorHTTPServer((options.host, 0), self.state, KAGGLE)
        self.state.inside_url = f"http://localhost:{self._inside.server_address[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True),
            threading.Thread(target=self._inside.serve_forever, args=(0.05,), daemon=True),
            threading.Thread(target=self._tick, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.1):
            self.state.reconcile()

    def stop(self) -> None:
        """Stop serving and cancel every session still running, waiting for them to end."""
        self._stop.set()
        for server in (self._server, self._inside):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        runner = self.state.kernels
        with self.state.lock:
            active = [s for s in runner.sessions.values() if s.active]
            for session in active:
                runner.cancel(session.id, session.owner)
        started = [s for s in runner.sessions.values() if s.started_at is not None]
        deadline = time.monotonic() + _STOP_WAIT_SECONDS
        while time.monotonic() < deadline:
            self.state.reconcile()
            if not any(s.active for s in active) and all(map(self._runner.exited, started)):
                return
            time.sleep(0.05)

    # ---- clients ------------------------------------------------------------------------

    def _key(self, username: str | None) -> tuple[str, str]:
        name = username or next(iter(self.state.options.users))
        return name, self.state.options.users[name]

    def client(self, username: str | None = None) -> KaggleClient:
        """A real kagglesdk KaggleClient for one of the configured users."""
        return emulator_client(self.url, *self._key(username))

    def kaggle_api(self, username: str | None = None) -> EmulatorKaggleApi:
        """A real high-level KaggleApi for one of the configured users."""
        from tests.kaggle_emulator.kaggle_api import EmulatorKaggleApi

        return EmulatorKaggleApi(self.url, *self._key(username))

    # ---- user secrets -------------------------------------------------------------------

    def set_secret(self, user: str, label: str, value: str) -> None:
        """Store a secret in a user's account (Kaggle: Add-ons -> Secrets -> Add secret)."""
        with self.state.lock:
            self.state.secrets.set(user, label, value)

    def attach_secret(self, kernel_ref: str, label: str) -> None:
        """Let kernel "owner/slug" read its owner's secret `label`, from its next session on."""
        with self.state.lock:
            self.state.secrets.attach(kernel_ref, label)

    def detach_secret(self, kernel_ref: str, label: str) -> None:
        with self.state.lock:
            self.state.secrets.detach(kernel_ref, label)

    # ---- inspection ---------------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self.state.faults

    @property
    def push_counts(self) -> dict[str, int]:
        """Pushes that created a kernel version (and a session), by "owner/slug"."""
        with self.state.lock:
            return dict(self.state.kernels.push_counts)

    def sessions(self, kernel_ref: str | None = None) -> list[KernelSession]:
        with self.state.lock:
            found = sorted(self.state.kernels.sessions.values(), key=lambda s: s.id)
        return [s for s in found if kernel_ref is None or s.kernel_ref == kernel_ref]

    @property
    def shells(self) -> set[str]:
        """Kernels ("owner/slug") a refused first push left empty (`refused_push_leaves_shell`)."""
        with self.state.lock:
            return set(self.state.kernels.first_contact.shells)

    def peak_private_versions(self, user: str = "alice") -> int:
        """The most private dataset versions `user` ever held at once."""
        with self.state.lock:
            return self.state.datasets.peak_private_versions.get(user, 0)

    def set_private_storage(self, limit: int | None) -> None:
        """Change `private_storage_bytes` from now on (versions already stored stay)."""
        with self.state.lock:
            self.state.datasets.private_storage_bytes = limit

    def set_gpu_allowance(self, seconds: float) -> None:
        """Change `gpu_allowance_seconds` from now on (0: the week's GPU quota is spent)."""
        with self.state.lock:
            self.state.kernels.set_allowance(Accelerator.GPU, seconds)

    def peak_private_bytes(self, user: str = "alice") -> int:
        with self.state.lock:
            return self.state.datasets.peak_private_bytes.get(user, 0)

    def dataset(self, ref: str) -> Dataset | None:
        with self.state.lock:
            return next((d for d in self.state.datasets.all() if d.ref == ref), None)

    def calls(self, method: str | None = None, user: str | None = None) -> list[Call]:
        """Every authenticated RPC so far (rate-limited ones included), oldest first."""
        with self.state.lock:
            found = list(self.state.calls.calls)
        return [
            c for c in found if (method is None or c.method == method) and (user in (None, c.user))
        ]

    @property
    def callers(self) -> set[str]:
        """Everyone who has called the API, by the account their credentials name."""
        return {call.user for call in self.calls()}

    def latest_session_id(self, kernel_ref: str) -> int:
        """The id CancelKernelSession takes, which Kaggle never tells its client."""
        return self.sessions(kernel_ref)[-1].id

    def link_bytes(self, link: str = ORCHESTRATOR) -> int:
        """Bytes uploaded plus downloaded over `link` so far ("orchestrator" or "kaggle")."""
        return self.state.links.crossed(link)

    def link_counters(self, link: str = ORCHESTRATOR) -> LinkCounters:
        return self.state.links.counters[link]

    @property
    def internal_errors(self) -> list[str]:
        return list(self.state.internal_errors)


@contextmanager
def start_emulator(
    root: Path, runner: SessionRunner | None = None, **options: Any
) -> Iterator[Emulator]:
    """Run an emulator for the duration of a with-block; options are EmulatorOptions fields."""
    emulator = Emulator(root, EmulatorOptions(**options), runner)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()
