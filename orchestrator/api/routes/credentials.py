"""/api/v1/credentials/kaggle: store, inspect and forget your Kaggle credentials.

The key goes in and never comes out: responses say only whether one is configured.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response, status

from orchestrator.api.deps import CurrentUser, ServicesDep
from orchestrator.api.links import link
from orchestrator.credentials import delete_kaggle_credentials, store_kaggle_credentials
from orchestrator.models import KaggleCredential
from orchestrator.wire import KaggleCredentialsIn, KaggleCredentialsOut

PREFIX = "/api/v1/credentials"
_PATH = f"{PREFIX}/kaggle"
router = APIRouter(
    prefix=_PATH,
    tags=["credentials"],
    responses={401: {"description": "Missing or invalid API token"}},
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "You have stored no Kaggle credentials"}
}


def _out(row: KaggleCredential) -> KaggleCredentialsOut:
    return KaggleCredentialsOut(username=row.username, configured=True, updated_at=row.updated_at)


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "no Kaggle credentials stored")


@router.put(
    "",
    response_model=KaggleCredentialsOut,
    # FastAPI answers a body that is not UTF-8 with 400 before validation runs.
    responses={
        200: {
            "links": {
                "ShowCredentials": link(_PATH, "get", "What is stored now"),
                "ForgetCredentials": link(_PATH, "delete", "Delete them"),
            }
        },
        400: {"description": "The body could not be read as JSON"},
    },
)
def store_credentials(
    body: KaggleCredentialsIn, user: CurrentUser, services: ServicesDep
) -> KaggleCredentialsOut:
    """Store your Kaggle user name and API key, replacing any stored before."""
    with services.db.transaction() as session:
        row = store_kaggle_credentials(
            session, services.secret_box, user.id, body.username, body.key
        )
        return _out(row)


@router.get("", response_model=KaggleCredentialsOut, responses=_NOT_FOUND)
def show_credentials(user: CurrentUser, services: ServicesDep) -> KaggleCredentialsOut:
    """Whether you have stored Kaggle credentials, and for which Kaggle user. Never the key."""
    with services.db.transaction() as session:
        row = session.get(KaggleCredential, user.id)
        if row is None:
            raise _not_found()
        return _out(row)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, responses=_NOT_FOUND)
def forget_credentials(user: CurrentUser, services: ServicesDep) -> Response:
    """Forget your Kaggle credentials."""
    with services.db.transaction() as session:
        if not delete_kaggle_credentials(session, user.id):
            raise _not_found()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
