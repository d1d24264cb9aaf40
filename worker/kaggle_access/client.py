"""Baton's one seam to Kaggle: the official `kagglesdk` client and `kaggle` KaggleApi, per account.

Every call goes through `KaggleAccount.call` or `.transfer`, which bound it in time (kagglesdk
sends requests with no timeout at all) and turn whatever the client raises into the backend error
contract (orchestrator/backends/base.py): `Transient` with Kaggle's Retry-After, `Rejected`
(`KaggleAuthError` for refused credentials) or `Gone` (`KaggleNotFound`). Tests hand in a client
factory that points the real client at the Kaggle API emulator.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import io
import logging
import os
import zipfile
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import requests
from kagglesdk import KaggleClient
from kagglesdk.datasets.types.dataset_api_service import ApiDataset, ApiGetDatasetRequest

from worker.boundary.errors import BackendError, Gone, Rejected, Transient

if TYPE_CHECKING:
    from kaggle.api.kaggle_api_extended import KaggleApi

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_TIMEOUT_SECONDS = 60.0
# Uploads and downloads move checkpoints of gigabytes.
TRANSFER_TIMEOUT_SECONDS = 3600.0
_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
# Kaggle's new API tokens (Bearer) start with this; legacy keys are 32 hex digits.
API_TOKEN_PREFIX = "KGAT_"


def _call_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="kaggle-call")


_calls = _call_pool()


def _new_pool_in_child() -> None:
    """A forked child (a Celery prefork worker, mutmut's runner) has none of its parent's
    threads: calls handed to the inherited pool would never run, each one waiting out its
    timeout. The child starts a pool of its own."""
    global _calls
    _calls = _call_pool()


os.register_at_fork(after_in_child=_new_pool_in_child)


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


def is_api_token(key: str) -> bool:
    """A new-style Kaggle API token (sent as Bearer), as opposed to a legacy API key."""
    return key.startswith(API_TOKEN_PREFIX)


class _BearerAuth(requests.auth.AuthBase):
    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request


def authenticate_as(client: KaggleClient, username: str, key: str) -> KaggleClient:
    """Make every call of `client` carry exactly these credentials.

    kagglesdk's `_try_fill_auth` prefers a token from the environment (KAGGLE_API_TOKEN,
    ~/.kaggle/access_token, a Kaggle session's KAGGLE_API_V1_TOKEN) over the username and key
    it was given, so a host's token would act for every Baton user. Marking the client signed
    in before its session exists skips that lookup; the auth is then set here.
    """
    http = client.http_client()
    http._signed_in = True
    http._init_session()
    auth: Any = _BearerAuth(key) if is_api_token(key) else (username, key)
    http._session.auth = auth
    return client


class KaggleNotFound(Gone):
    """The kernel, dataset or version does not exist (or is not visible yet)."""


class KaggleServerError(Transient):
    """Kaggle answered 5xx; usually passing, but a kernel "shell" answers GetKernel 500 for good."""


class KaggleAuthError(Rejected):
    """Kaggle refused the account's credentials, or this account may not do this."""


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds from a response's Retry-After header (delta-seconds or an HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    date = getattr(response, "headers", {}).get("Date")
    now = parsedate_to_datetime(date) if date else None
    return max(0.0, (when - now).total_seconds()) if now else None


def classify(exc: BaseException, what: str, *, busy_403: bool = False) -> BackendError:
    """Map a client exception to what the engine does next.

    `busy_403`: the caller knows a 403 here means "the dataset's first version is still
    processing" (kagglehub PR #182); anywhere else a 403 is a real refusal.
    """
    if isinstance(exc, BackendError):
        return exc
    status = status_of(exc)
    if status == 404:
        return KaggleNotFound(f"{what}: not found")
    if status == 403 and busy_403:
        return Transient(f"{what}: the dataset's first version is still processing")
    if status in (401, 403):
        return KaggleAuthError(f"{what}: Kaggle refused access ({status})")
    if status == 429:
        return Transient(f"{what}: rate limited by Kaggle", retry_after_of(exc))
    if status is not None and status >= 500:
        return KaggleServerError(f"{what}: {type(exc).__name__} {status}")
    if status in _RETRYABLE_STATUS or isinstance(
        exc, requests.ConnectionError | requests.Timeout | TimeoutError | ConnectionError
    ):
        return Transient(f"{what}: {type(exc).__name__} {status or ''}".strip())
    if isinstance(exc, ValueError) and "Permission" in str(exc):
        # KaggleApi.kernels_output turns a 401/403 into ValueError("... Permission ... denied").
        return KaggleAuthError(f"{what}: Kaggle refused access")
    if isinstance(exc, zipfile.BadZipFile | EOFError):
        return Transient(f"{what}: the download was not a complete archive")
    return Rejected(f"{what}: {type(exc).__name__}: {exc}")


class KaggleAccount:
    """One Kaggle account's access: RPCs through kagglesdk, transfers through KaggleApi.

    `key` is a legacy API key or a new API token (`KGAT_...`); either is sent explicitly, and
    tokens found in the environment or in ~/.kaggle are never used instead.
    """

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
        client = self._factory(self.username, self._key, **kwargs)
        return authenticate_as(client, self.username, self._key)

    def call(self, what: str, fn: Callable[[KaggleClient], T], timeout: float | None = None) -> T:
        """Run `fn(client)` with a time bound; raise only Transient, Rejected or Gone."""
        return self._bounded(what, lambda: fn(self.client()), timeout)

    def dataset(self, slug: str, owner: str | None = None) -> ApiDataset:
        """One GetDataset call for `owner/slug` (this account's own by default); a dataset that
        does not exist (or cannot be seen) raises KaggleNotFound."""
        request = ApiGetDatasetRequest()
        request.owner_slug, request.dataset_slug = owner or self.username, slug
        return self.call("GetDataset", lambda c: c.datasets.dataset_api_client.get_dataset(request))

    def own_dataset(self, slug: str) -> ApiDataset | None:
        """This account's dataset `slug`, or None where it does not exist."""
        try:
            return self.dataset(slug)
        except KaggleNotFound:
            return None

    def transfer(self, what: str, fn: Callable[[KaggleApi], T], *, busy_403: bool = False) -> T:
        """Run `fn(api)` with the high-level KaggleApi (blob uploads, output downloads)."""
        return self._bounded(what, lambda: fn(self._api()), TRANSFER_TIMEOUT_SECONDS, busy_403)

    def fetch(self, what: str, fn: Callable[[], T]) -> T:
        """Run a plain download (a signed URL, no credentials) under the transfer bound."""
        return self._bounded(what, fn, TRANSFER_TIMEOUT_SECONDS)

    def _bounded(
        self, what: str, fn: Callable[[], T], timeout: float | None, busy_403: bool = False
    ) -> T:
        future = _calls.submit(fn)
        try:
            return future.result(timeout=timeout or self.timeout_seconds)
        except concurrent.futures.TimeoutError as exc:
            raise Transient(f"{what}: no answer in time") from exc
        except (
            requests.RequestException,
            OSError,
            ValueError,
            RuntimeError,
            EOFError,
            zipfile.BadZipFile,
        ) as exc:
            # The client's own failures: HTTP errors, bad archives, KaggleApi's ValueErrors.
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
