"""Users and their API tokens. Tokens are random, shown once, and stored only as sha256."""

from __future__ import annotations

import hashlib
import os
import secrets
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.models import ApiToken, User

TOKEN_PREFIX = "bt_"
ADMIN_USER = "admin"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def get_or_create_user(session: Session, name: str) -> User:
    user = session.scalars(select(User).where(User.name == name)).first()
    if user is None:
        user = User(id=f"u{uuid.uuid4().hex[:12]}", name=name)
        session.add(user)
        session.flush()
    return user


def register_token(session: Session, user: User, token: str, label: str) -> None:
    digest = hash_token(token)
    if session.scalars(select(ApiToken).where(ApiToken.token_hash == digest)).first() is None:
        session.add(
            ApiToken(id=f"t{uuid.uuid4().hex[:12]}", user_id=user.id, name=label, token_hash=digest)
        )


def issue_token(session: Session, user_name: str, label: str = "cli") -> str:
    """Create the user if needed and return a new token for it (the only time it is visible)."""
    token = new_token()
    register_token(session, get_or_create_user(session, user_name), token, label)
    return token


def user_for_token(session: Session, token: str) -> User | None:
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(token))).first()
    return session.get(User, row.user_id) if row else None


def ensure_admin_token(session: Session, configured: str | None, token_file: Path) -> str:
    """Make BATON_ADMIN_TOKEN valid, or create an admin token in a 0600 file on first start."""
    if configured:
        token = configured
    elif token_file.exists():
        token = token_file.read_text().strip()
    else:
        token = new_token()
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    register_token(session, get_or_create_user(session, ADMIN_USER), token, "admin")
    return token
