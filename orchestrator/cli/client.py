"""The CLI's REST client: every failure becomes one CliError line; answers become API models.

On the standard library's http.client, one connection per request. The CLI must answer at once
(benchmarks/cli_latency.py), and on this machine under load http.client added about 40 ms to
the CLI's start where urllib3 added about 100 and httpx about 150 (httpx also loads its own
command line: click, pygments, rich.syntax).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import TypeAdapter, ValidationError

from orchestrator.cli.errors import CliError
from orchestrator.cli.settings import check_url

T = TypeVar("T")


@dataclass(frozen=True)
class Response:
    """An answer, read whole."""

    status: int
    reason: str
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


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
        self.url = check_url(url)
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path
        self._timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}"}

    def close(self) -> None:
        """Nothing is held between requests."""

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    @contextmanager
    def _exchange(
        self,
        method: str,
        path: str,
        body: Any,
        params: dict[str, Any] | None,
        headers: dict[str, str] | None,
    ) -> Iterator[http.client.HTTPResponse]:
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        sent = {**self.headers, **(headers or {})}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        connection = self._connection()
        try:
            with self._translated():
                connection.request(method, target, body=payload, headers=sent)
                response = connection.getresponse()
            yield response
        finally:
            connection.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        with self._exchange(method, path, body, params, headers) as answer, self._translated():
            response = Response(
                answer.status,
                answer.reason,
                answer.read(),
                {k.lower(): v for k, v in answer.getheaders()},
            )
        self._raise_for(response)
        return response

    @contextmanager
    def stream(
        self, method: str, path: str, *, headers: dict[str, str] | None = None
    ) -> Iterator[http.client.HTTPResponse]:
        """A response to read in chunks (downloads), with `chunks`."""
        with self._exchange(method, path, None, None, headers) as answer:
            if answer.status >= 400:
                with self._translated():
                    data = answer.read()
                self._raise_for(Response(answer.status, answer.reason, data))
            yield answer

    def chunks(self, answer: http.client.HTTPResponse, size: int) -> Iterator[bytes]:
        while True:
            with self._translated():
                chunk = answer.read(size)
            if not chunk:
                return
            yield chunk

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except TimeoutError:
            raise CliError(f"the Baton server at {self.url} did not answer in time") from None
        except (OSError, http.client.RemoteDisconnected, http.client.IncompleteRead):
            # Refused, reset, cut off, or a name that does not resolve.
            raise ServerUnreachable(
                f"cannot reach the Baton server at {self.url}: is `baton serve` running?"
            ) from None
        except http.client.HTTPException as exc:
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
