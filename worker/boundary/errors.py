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


class Rejected(BackendError):
    """Final for this launch or session: the backend refused, with the reason."""


class Gone(BackendError):
    """The session, kernel or dataset no longer exists."""
