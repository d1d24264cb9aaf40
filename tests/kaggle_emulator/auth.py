"""Who is calling: Basic auth (username + API key) or a bearer token. Keys are never logged."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping

from tests.kaggle_emulator.errors import ApiError

_UNAUTHENTICATED = "Unauthenticated: a valid username and API key are required"


def authenticate(header: str | None, users: Mapping[str, str], tokens: Mapping[str, str]) -> str:
    """The caller's username; ApiError(401) when the credentials are missing or wrong."""
    if not header:
        raise ApiError(401, _UNAUTHENTICATED)
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        for token, username in tokens.items():
            if hmac.compare_digest(token.encode(), value.strip().encode()):
                return username
        raise ApiError(401, _UNAUTHENTICATED)
    if scheme.lower() != "basic":
        raise ApiError(401, _UNAUTHENTICATED)
    try:
        username, _, key = base64.b64decode(value.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise ApiError(401, _UNAUTHENTICATED) from None
    expected = users.get(username)
    if expected is None or not hmac.compare_digest(expected.encode(), key.encode()):
        raise ApiError(401, _UNAUTHENTICATED)
    return username
