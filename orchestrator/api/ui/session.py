"""The status page's sign-in: an API token kept encrypted in an HttpOnly cookie, plus CSRF.

The cookie holds the token sealed by the server's SecretBox (authenticated encryption), so each
request checks the token itself: a revoked token ends its browser sessions too. The CSRF token
for forms is an HMAC keyed by the cookie, which a page on another site can neither read nor make.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from orchestrator.auth import user_for_token
from orchestrator.db import Database
from orchestrator.models import User
from orchestrator.secret_box import SecretBox, SecretBoxError

COOKIE = "baton_session"
MAX_AGE_SECONDS = 12 * 3600


@dataclass(frozen=True)
class SignedIn:
    user: User
    csrf: str


def seal(box: SecretBox, token: str, now: float | None = None) -> str:
    return box.encrypt(json.dumps({"token": token, "at": now or time.time()}))


def csrf_for(cookie: str) -> str:
    return hmac.new(cookie.encode(), b"baton-csrf", hashlib.sha256).hexdigest()


def csrf_ok(cookie: str, submitted: str | None) -> bool:
    return submitted is not None and hmac.compare_digest(csrf_for(cookie), submitted)


def signed_in(
    db: Database, box: SecretBox, cookie: str | None, now: float | None = None
) -> SignedIn | None:
    """Who the cookie signs in, or None (no cookie, tampered, expired, or the token revoked)."""
    if not cookie:
        return None
    try:
        payload = json.loads(box.decrypt(cookie))
    except (SecretBoxError, ValueError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("token"), str):
        return None
    issued = payload.get("at")
    if not isinstance(issued, int | float) or (now or time.time()) - issued > MAX_AGE_SECONDS:
        return None
    with db.transaction() as session:
        user = user_for_token(session, payload["token"])
        if user is None:
            return None
        session.expunge(user)
    return SignedIn(user=user, csrf=csrf_for(cookie))
