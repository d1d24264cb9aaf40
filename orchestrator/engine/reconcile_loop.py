"""The embedded reconcile loop: a thread in `baton serve` that ticks the engine."""

from __future__ import annotations

import logging
import threading

from orchestrator.engine.facade import Engine

log = logging.getLogger(__name__)


class ReconcileLoop:
    """Reconciles every job each `interval` seconds, or at once when woken."""

    def __init__(self, engine: Engine, interval: float) -> None:
        self.engine = engine
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="baton-reconcile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.engine.reconcile_all()
            except Exception:  # the loop must outlive one bad tick; the error is logged
                log.exception("reconcile tick failed")
            self._wake.wait(self.interval)
            self._wake.clear()
