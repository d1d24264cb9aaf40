"""405 answers whose `Allow` lists every method of the path (RFC 9110 15.5.6).

FastAPI makes one route per (path, method), and the router answers 405 from the first route
whose path matched, so on its own `Allow` names only that route's methods.
"""

from __future__ import annotations

from fastapi import Request, status
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def methods_for_path(request: Request) -> set[str]:
    """Every method some route serves at this request's path, asked of the router itself."""
    routes = request.app.router.routes
    return {
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    }


async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
    detail, headers = "Method Not Allowed", {}
    if isinstance(exc, HTTPException):
        detail, headers = exc.detail, dict(exc.headers or {})
    # The answering route's own list (a mount's, e.g. static files) plus every sibling route's.
    named = {method.strip() for method in headers.get("Allow", "").split(",") if method.strip()}
    headers["Allow"] = ", ".join(sorted(named | methods_for_path(request)))
    return JSONResponse(
        {"detail": detail}, status_code=status.HTTP_405_METHOD_NOT_ALLOWED, headers=headers
    )
