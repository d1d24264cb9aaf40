"""The backend error contract: the only errors a backend may raise.

orchestrator/backends/base.py re-exports them; they live in the session boundary so that the Kaggle
code running inside a kernel (which imports nothing from the orchestrator) raises the same ones.
"""

from __future__ import annotations


class BackendError(Exception):
    """Base of the three kinds below; never raised itself."""


class Transient(BackendError):
    """Worth retrying later (network, rate limit, 5xx, busy); `retry_after` in seconds if known."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Pending(Transient):
    """Nothing failed: the backend is still working on it (Kaggle processing a new dataset
    version). The engine looks again at the backend's poll interval (or `retry_after`), not
    after a back-off that grows with each look."""


class Rejected(BackendError):
    """Final for this launch or session: the backend refused, with the reason."""


class AccountRefused(Rejected):
    """The account itself may not do this (e.g. GPU without phone verification): no retry of
    the segment can succeed, so the job fails at once with the reason."""


class Gone(BackendError):
    """The session, kernel or dataset no longer exists."""
