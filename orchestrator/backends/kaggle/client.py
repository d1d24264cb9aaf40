"""Baton's one seam to Kaggle: the official `kagglesdk` client and `kaggle` KaggleApi, per account.

Every call goes through `KaggleAccount.call`, which bounds it in time (kagglesdk sends requests
with no timeout at all) and sorts failures into worth-retrying (429, 5xx, network, timeouts) and
final. Tests hand in a client factory that points the real client at the Kaggle API emulator.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import io
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import requests
from kagglesdk import KaggleClient

from orchestrator.backends.base import Rejected, Transient

if TYPE_CHECKING:
    from kaggle.api.kaggle_api_extended import KaggleApi

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_TIMEOUT_SECONDS = 60.0
# Uploads and downloads move checkpoints of gigabytes.
TRANSFER_TIMEOUT_SECONDS = 3600.0
_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_calls = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="kaggle-call")


@functools.cache
def _kaggle_api_class() -> type[KaggleApi]:
    # `import kaggle` authenticates from ~/.kaggle at import time and prints help without it.
    # Baton passes credentials explicitly, so that noise stays out of its output (once).
    with contextlib.redirect_stdout(io.StringIO()):
        from kaggle.api.kaggle_api_extended import KaggleApi
    api_class: type[KaggleApi] = KaggleApi
    return api_class


class ClientFactory(Protocol):
    def __call__(self, username: str, key: str, **kwargs: Any) -> KaggleClient: ...


def production_client(username: str, key: str, **kwargs: Any) -> KaggleClient:
    """kagglesdk's own choice of endpoint: KAGGLE_API_ENVIRONMENT, or production when unset."""
    return KaggleClient(env=None, username=username, password=key, **kwargs)


class KaggleNotFound(Exception):
    """The kernel, dataset or version does not exist (or is not visible yet)."""


class KaggleAuthError(Rejected):
    """Kaggle refused the account's credentials."""


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def classify(exc: BaseException, what: str, *, busy_403: bool = False) -> Exception:
    """Map a client exception to what the engine does next.

    `busy_403`: for dataset version pushes, 403 means the previous version is still processing.
    """
    status = status_of(exc)
    if status == 404:
        return KaggleNotFound(f"{what}: not found")
    if status == 403 and busy_403:
        return Transient(f"{what}: the previous version is still processing")
    if status in (401, 403):
        return KaggleAuthError(f"{what}: Kaggle refused access ({status})")
    if status in _RETRYABLE_STATUS or isinstance(
        exc, requests.ConnectionError | requests.Timeout | TimeoutError
    ):
        return Transient(f"{what}: {type(exc).__name__} {status or ''}".strip())
    return Rejected(f"{what}: {exc}")


class KaggleAccount:
    """One Kaggle account's access: RPCs through kagglesdk, transfers through KaggleApi."""

    def __init__(
        self,
        username: str,
        key: str,
        factory: ClientFactory = production_client,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.username = username
        self._key = key
        self._factory = factory
        self.timeout_seconds = timeout_seconds

    def __repr__(self) -> str:
        return f"KaggleAccount({self.username!r})"

    def client(self, **kwargs: Any) -> KaggleClient:
        return self._factory(self.username, self._key, **kwargs)

    def call(self, what: str, fn: Callable[[KaggleClient], T], timeout: float | None = None) -> T:
        """Run `fn(client)` with a time bound; raise Transient, KaggleNotFound, ..."""
        return self._bounded(what, lambda: fn(self.client()), timeout)

    def transfer(self, what: str, fn: Callable[[KaggleApi], T], *, busy_403: bool = False) -> T:
        """Run `fn(api)` with the high-level KaggleApi (blob uploads, output downloads)."""
        return self._bounded(what, lambda: fn(self._api()), TRANSFER_TIMEOUT_SECONDS, busy_403)

    def _bounded(
        self, what: str, fn: Callable[[], T], timeout: float | None, busy_403: bool = False
    ) -> T:
        future = _calls.submit(fn)
        try:
            return future.result(timeout=timeout or self.timeout_seconds)
        except concurrent.futures.TimeoutError as exc:
            raise Transient(f"{what}: no answer in time") from exc
        except (requests.RequestException, TimeoutError, OSError) as exc:
            raise classify(exc, what, busy_403=busy_403) from exc

    def _api(self) -> KaggleApi:
        account = self

        class AccountApi(_kaggle_api_class()):  # type: ignore[misc]
            """KaggleApi authenticated as this account, building clients through the factory."""

            def __init__(self) -> None:
                self.config_values = {
                    self.CONFIG_NAME_USER: account.username,
                    self.CONFIG_NAME_KEY: account._key,
                }
                self._authenticated = True

            def build_kaggle_client(self) -> KaggleClient:
                return account.client(response_processor=self.get_response_processor())

        return AccountApi()
