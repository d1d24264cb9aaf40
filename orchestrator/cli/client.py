"""The CLI's REST client: every failure becomes one CliError line; answers become API models.

On urllib3, which the CLI loads in about 25 ms where httpx took about 50 (httpx also loads its
own command line, click and pygments among it): the CLI must answer at once
(benchmarks/cli_latency.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlencode

import urllib3
from pydantic import TypeAdapter, ValidationError
from urllib3.exceptions import HTTPError, NewConnectionError, ProtocolError, TimeoutError

from orchestrator.cli.errors import CliError

T = TypeVar("T")

Response = urllib3.BaseHTTPResponse


class ServerUnreachable(CliError):
    """No answer at all: refused, reset or cut off (the server is down or restarting)."""


class Refused(CliError):
    """The server answered with an error status: one line for the user, the status for code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _detail(response: Response) -> str:
    text = response.data.decode(errors="replace")
    try:
        detail = json.loads(text).get("detail")
    except (ValueError, AttributeError):
        return text.strip()[:300] or response.reason or str(response.status)
    if isinstance(detail, list):
        # FastAPI's 422: name each field and the rule it broke.
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []) if p != 'body')}: {item.get('msg')}"
            for item in detail
            if isinstance(item, dict)
        )
    return str(detail)


class BatonClient:
    def __init__(self, url: str, token: str, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        # No retries: a failure is reported at once, in one line (watch retries on its own).
        self.http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False
        )

    def close(self) -> None:
        self.http.clear()

    def _url(self, path: str, params: dict[str, Any] | None) -> str:
        return f"{self.url}{path}" + (f"?{urlencode(params)}" if params else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        with self._translated():
            response = self.http.request(
                method,
                self._url(path, params),
                json=body,
                headers={**self.headers, **(headers or {})},
            )
        self._raise_for(response)
        return response

    @contextmanager
    def stream(
        self, method: str, path: str, *, headers: dict[str, str] | None = None
    ) -> Iterator[Response]:
        """A response read in chunks (downloads)."""
        with self._translated():
            response = self.http.request(
                method,
                self._url(path, None),
                headers={**self.headers, **(headers or {})},
                preload_content=False,
            )
            try:
                if response.status >= 400:
                    response.read()
                    self._raise_for(response)
                yield response
            finally:
                response.release_conn()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        # NewConnectionError is a kind of timeout in urllib3: it is caught first.
        try:
            yield
        except (NewConnectionError, ProtocolError):
            raise ServerUnreachable(
                f"cannot reach the Baton server at {self.url}: is `baton serve` running?"
            ) from None
        except TimeoutError:
            raise CliError(f"the Baton server at {self.url} did not answer in time") from None
        except HTTPError as exc:
            raise CliError(f"talking to {self.url} failed: {type(exc).__name__}") from None

    def _raise_for(self, response: Response) -> None:
        code = response.status
        if code < 400:
            return
        if code == 401:
            raise Refused(
                f"the server at {self.url} rejected the API token "
                "(check BATON_TOKEN or `baton config set token`)",
                code,
            )
        if code == 422:
            raise Refused(f"rejected: {_detail(response)}", code)
        if code in (404, 409, 410, 416):
            raise Refused(_detail(response), code)
        if code in (502, 503, 504):
            # A proxy in front of a server that is restarting.
            raise ServerUnreachable(f"the server answered {code}: {_detail(response)}")
        raise Refused(f"the server answered {code}: {_detail(response)}", code)

    def call(
        self,
        method: str,
        path: str,
        model: type[T],
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> T:
        """The response parsed into the API's own model (`model` may be e.g. list[JobOut])."""
        response = self.request(method, path, body=body, params=params)
        try:
            parsed: T = TypeAdapter(model).validate_json(response.data)
        except ValidationError as exc:
            raise CliError(
                f"unexpected answer from {self.url}{path}: {exc.error_count()} field(s) off "
                "(is the server the same Baton version?)"
            ) from None
        return parsed
