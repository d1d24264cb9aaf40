"""A checkpoint that lies on Kaggle, fetched inside a request: how its failures answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException, status

from orchestrator.backends.base import BackendError, Transient

DEFAULT_RETRY_AFTER_SECONDS = 30


@contextmanager
def fetching_from_kaggle(what: str) -> Iterator[None]:
    """503 with Retry-After while Kaggle cannot answer now; 409 where `what` cannot be fetched
    from where the job runs now (its backend cannot reach Kaggle's copy)."""
    try:
        yield
    except Transient as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"{what} lies on Kaggle and could not be fetched now: {exc}",
            headers={"Retry-After": str(int(exc.retry_after or DEFAULT_RETRY_AFTER_SECONDS))},
        ) from None
    except BackendError as exc:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"{what} lies on Kaggle and cannot be fetched: {exc}"
        ) from None
