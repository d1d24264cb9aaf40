"""Kaggle calls that must not outlive their session.

A blob upload cannot be interrupted, and one still running at the session's limit is killed with
the session, whose output Kaggle then drops: the committed checkpoint with it (a test saw this
when a checkpoint outgrew the time kept for its upload). So a publishing call runs in a daemon
thread and the session stops waiting for it at its deadline: it then exits in time, with its
checkpoint still in its output for the orchestrator to fetch (today's path).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from worker.boundary.errors import BackendError

T = TypeVar("T")


class TooLate(Exception):
    """The call was still running at the deadline; it is abandoned with the process."""


def call_before(deadline: float, call: Callable[[], T]) -> T:
    """`call()`'s value or the backend error it raised (the Kaggle client's contract:
    Transient, Rejected, Gone), or TooLate if it has not returned by `deadline`. Any other
    exception is a bug: the thread prints its traceback and this raises at once."""
    values: list[T] = []
    errors: list[BackendError] = []
    ended = threading.Event()

    def run() -> None:
        try:
            values.append(call())
        except BackendError as exc:
            errors.append(exc)
        finally:
            ended.set()

    thread = threading.Thread(target=run, name="baton-kaggle-call", daemon=True)
    thread.start()
    ended.wait(max(0.0, deadline - time.time()))
    if errors:
        raise errors[0]
    if values:
        return values[0]
    if ended.is_set():
        raise RuntimeError("the Kaggle call failed with a bug; its traceback is printed above")
    raise TooLate(f"still running {time.time() - deadline:+.1f} s from the deadline")
