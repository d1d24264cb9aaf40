"""The CLI's REST client: every failure becomes one CliError line; answers become API models."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from orchestrator.cli.errors import CliError

T = TypeVar("T")


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(detail, list):
        # FastAPI's 422: name each field and the rule it broke.
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []) if p != 'body')}: {item.get('msg')}"
            for item in detail
            if isinstance(item, dict)
        )
    return str(detail)


class BatonClient:
    def __init__(self, url: str, token: str, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        with self._translated():
            response = self.http.request(method, path, json=body, params=params, headers=headers)
        self._raise_for(response)
        return response

    @contextmanager
    def stream(
        self, method: str, path: str, *, headers: dict[str, str] | None = None
    ) -> Iterator[httpx.Response]:
        """A response read in chunks (downloads)."""
        with self._translated(), self.http.stream(method, path, headers=headers) as response:
            if response.status_code >= 400:
                response.read()
                self._raise_for(response)
            yield response

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except httpx.ConnectError:
            raise CliError(
                f"cannot reach the Baton server at {self.url}: is `baton serve` running?"
            ) from None
        except httpx.TimeoutException:
            raise CliError(f"the Baton server at {self.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise CliError(f"talking to {self.url} failed: {type(exc).__name__}") from None

    def _raise_for(self, response: httpx.Response) -> None:
        code = response.status_code
        if code < 400:
            return
        if code == 401:
            raise CliError(
                f"the server at {self.url} rejected the API token "
                "(check BATON_TOKEN or `baton config set token`)"
            )
        if code == 422:
            raise CliError(f"rejected: {_detail(response)}")
        if code in (404, 409, 410, 416):
            raise CliError(_detail(response))
        raise CliError(f"the server answered {code}: {_detail(response)}")

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
            parsed: T = TypeAdapter(model).validate_json(response.content)
        except ValidationError as exc:
            raise CliError(
                f"unexpected answer from {self.url}{path}: {exc.error_count()} field(s) off "
                "(is the server the same Baton version?)"
            ) from None
        return parsed
