"""/api/v1/tokens: create, list and revoke your own API tokens. A token is shown only once."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response, status

from orchestrator.api.deps import CurrentToken, CurrentUser, ServicesDep, TokenId
from orchestrator.api.links import link
from orchestrator.auth import (
    BootstrapToken,
    TokenNotFound,
    list_tokens,
    new_token,
    register_token,
    revoke_token,
)
from orchestrator.models import ApiToken
from orchestrator.wire import NewToken, TokenIn, TokenOut

router = APIRouter(
    prefix="/api/v1/tokens",
    tags=["tokens"],
    responses={401: {"description": "Missing, invalid, expired or revoked API token"}},
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such token of yours"}}


def _out(row: ApiToken, current_id: str) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "last_used_at": row.last_used_at,
        "bootstrap": row.bootstrap,
        "current": row.id == current_id,
    }


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=NewToken,
    responses={
        201: {
            "links": {
                "RevokeToken": link(
                    "/api/v1/tokens/{token_id}",
                    "delete",
                    "Revoke the new token",
                    token_id="$response.body#/id",
                )
            }
        },
        400: {"description": "The body could not be read as JSON"},
        422: {
            "description": "A field breaks its schema, or expires_at is not between now and "
            "10 years from now (a rule the schema cannot state)"
        },
    },
)
def create_token(
    body: TokenIn, user: CurrentUser, token: CurrentToken, services: ServicesDep
) -> NewToken:
    """A new token for yourself, optionally expiring."""
    secret = new_token()
    with services.db.transaction() as session:
        row = register_token(session, user, secret, body.name, expires_at=body.expires_at)
        return NewToken(**_out(row, token.id), token=secret)


@router.get("", response_model=list[TokenOut])
def get_tokens(user: CurrentUser, token: CurrentToken, services: ServicesDep) -> list[TokenOut]:
    """Your tokens, with when each was last used; never the tokens themselves."""
    with services.db.transaction() as session:
        return [TokenOut(**_out(row, token.id)) for row in list_tokens(session, user.id)]


@router.delete(
    "/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=_NOT_FOUND
    | {409: {"description": "The admin's start-up token: change BATON_ADMIN_TOKEN instead"}},
)
def delete_token(token_id: TokenId, user: CurrentUser, services: ServicesDep) -> Response:
    """Revoke one of your tokens; it fails from the next request on."""
    try:
        with services.db.transaction() as session:
            revoke_token(session, user.id, token_id)
    except TokenNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id} of yours") from exc
    except BootstrapToken as exc:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "this is the admin's start-up token: set a new BATON_ADMIN_TOKEN (or delete the "
            "admin-token file) and restart to replace it",
        ) from exc
    return Response(status_code=status.HTTP_204_NO_CONTENT)
