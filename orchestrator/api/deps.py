"""FastAPI dependencies: the services, the current user."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import InternalError, OperationalError

from orchestrator.auth import record_use, token_for, use_due
from orchestrator.models import ApiToken, User, utcnow
from orchestrator.service import Services


async def get_services(request: Request) -> Services:
    # async: a plain lookup runs on the event loop, not through the thread pool.
    services: Services = request.app.state.services
    return services


log = logging.getLogger(__name__)

ServicesDep = Annotated[Services, Depends(get_services)]
_bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer bt_…`")


@dataclass(frozen=True)
class Caller:
    token: ApiToken
    user: User


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def refuse_if_throttled(services: Services, client: str) -> None:
    """429 with Retry-After while this client has failed to authenticate too often."""
    wait = services.auth_failures.retry_after(client)
    if wait is not None:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many failed authentications from this address; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def current_caller(
    request: Request,
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller's live token and its user, in one query; the token's use is recorded at most
    once a minute, so a read stays a read. Failures are throttled per client address."""
    found = None
    now = utcnow()
    client = client_address(request)
    refuse_if_throttled(services, client)
    if credentials is not None:
        with services.db.reading() as session:
            found = token_for(session, credentials.credentials, now)
    if found is None:
        if credentials is not None:  # a missing token is a mistake, a wrong one a guess
            services.auth_failures.failed(client)
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing, invalid, expired or revoked API token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    row, user = found
    if not use_due(row, now):  # most requests: no transaction opened for nothing
        return Caller(row, user)
    try:
        with services.db.transaction() as session:
            record_use(session, row, now)
    except (OperationalError, InternalError) as exc:
        # Last use is bookkeeping: a database that refuses writes says so at /healthz.
        log.warning("could not record the use of token %s: %s", row.id, type(exc).__name__)
    return Caller(row, user)


async def current_token(caller: Annotated[Caller, Depends(current_caller)]) -> ApiToken:
    return caller.token


async def current_user(caller: Annotated[Caller, Depends(current_caller)]) -> User:
    return caller.user


CurrentToken = Annotated[ApiToken, Depends(current_token)]
CurrentUser = Annotated[User, Depends(current_user)]

# Ids are checked before any query: a NUL byte or a 10,000-character id never reaches the
# database (PostgreSQL refuses NUL in text with an error, not a miss).
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="A job id, as submit returned it")]
TokenId = Annotated[str, Path(pattern=ID_PATTERN, description="A token's id (GET /api/v1/tokens)")]
# Steps and event ids are 32-bit integer columns in PostgreSQL: a larger number in a path or a
# query is refused before any query, where PostgreSQL would raise "integer out of range".
MAX_DB_INTEGER = 2**31 - 1
Step = Annotated[int, Path(ge=0, le=MAX_DB_INTEGER, description="A checkpoint's step")]
