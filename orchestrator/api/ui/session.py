"""The status page's sign-in: a server-side session behind an HttpOnly cookie, plus CSRF.

The cookie holds a random secret; the server keeps only its sha256 (ui_sessions), tied to the
API token used to sign in. A request is signed in while that row exists, is not past its 12 h,
and its token is still live: signing out deletes the row, so a copied cookie stops working at
once, and revoking the token ends its browser sessions too. The CSRF token for forms is an HMAC
keyed by the cookie, which a page on another site can neither read nor make. Sign-in has its own
short-lived cookie, so another site cannot post its own token into a victim's browser.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from orchestrator.auth import hash_token, token_for
from orchestrator.db import Database
from orchestrator.models import ApiToken, UiSession, User, utcnow

COOKIE = "baton_session"
SIGNIN_COOKIE = "baton_signin"
MAX_AGE_SECONDS = 12 * 3600
SIGNIN_MAX_AGE_SECONDS = 3600


@dataclass(frozen=True)
class SignedIn:
    user: User
    csrf: str


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def csrf_for(cookie: str) -> str:
    return hmac.new(cookie.encode(), b"baton-csrf", hashlib.sha256).hexdigest()


def csrf_ok(cookie: str, submitted: str | None) -> bool:
    return (
        bool(cookie) and submitted is not None and hmac.compare_digest(csrf_for(cookie), submitted)
    )


def start_session(db: Database, token: str, now: datetime | None = None) -> str | None:
    """A new session for a live API token; returns the cookie's secret, or None."""
    now = now or utcnow()
    secret = new_secret()
    with db.transaction() as session:
        found = token_for(session, token, now)
        if found is None:
            return None
        session.add(
            UiSession(
                id_hash=hash_token(secret),
                token_id=found[0].id,
                created_at=now,
                expires_at=now + timedelta(seconds=MAX_AGE_SECONDS),
            )
        )
    return secret


def end_session(db: Database, cookie: str | None) -> None:
    if cookie:
        with db.transaction() as session:
            session.execute(delete(UiSession).where(UiSession.id_hash == hash_token(cookie)))


def signed_in(db: Database, cookie: str | None, now: datetime | None = None) -> SignedIn | None:
    """Who the cookie signs in, or None (no such session, signed out, expired, token revoked)."""
    if not cookie or len(cookie) > 256:
        return None
    now = now or utcnow()
    with db.transaction() as session:
        row = session.scalars(
            select(UiSession).where(UiSession.id_hash == hash_token(cookie))
        ).first()
        if row is None or row.expires_at <= now:
            return None
        user = _live_token_user(session, row.token_id, now)
        if user is None:
            return None
        session.expunge(user)
    return SignedIn(user=user, csrf=csrf_for(cookie))


def _live_token_user(session: Session, token_id: str, now: datetime) -> User | None:
    found = session.execute(
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.id == token_id)
    ).first()
    if found is None:
        return None
    token, user = found
    if token.expires_at is not None and token.expires_at <= now:
        return None
    return user
