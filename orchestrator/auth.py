"""Users and their API tokens. Tokens are random, shown once, and stored only as sha256.

A token may expire; a revoked token is deleted, so it fails at once. The admin's start-up
(bootstrap) token is derived again at each start, so changing BATON_ADMIN_TOKEN retires the old.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import secrets
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from orchestrator.models import ApiToken, User, utcnow

log = logging.getLogger(__name__)

TOKEN_PREFIX = "bt_"
ADMIN_USER = "admin"
# A configured admin token must look random: at least this long, and at least this many bits
# by its characters' spread (`openssl rand -hex 16` gives 32 characters and about 120).
MIN_ADMIN_TOKEN_CHARS = 32
MIN_ADMIN_TOKEN_BITS = 96
ADMIN_TOKEN_ADVICE = "e.g. BATON_ADMIN_TOKEN=bt_$(openssl rand -hex 24)"
# last_used_at is written at most this often per token: a busy client must not turn every
# read into a write.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def get_or_create_user(session: Session, name: str) -> User:
    user = session.scalars(select(User).where(User.name == name)).first()
    if user is None:
        user = User(id=f"u{uuid.uuid4().hex[:12]}", name=name)
        session.add(user)
        session.flush()
    return user


def register_token(
    session: Session,
    user: User,
    token: str,
    label: str,
    *,
    expires_at: datetime | None = None,
    bootstrap: bool = False,
) -> ApiToken:
    digest = hash_token(token)
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if row is None:
        row = ApiToken(
            id=f"t{uuid.uuid4().hex[:12]}",
            user_id=user.id,
            name=label,
            token_hash=digest,
            expires_at=expires_at,
            bootstrap=bootstrap,
        )
        session.add(row)
        session.flush()
    return row


def issue_token(
    session: Session, user_name: str, label: str = "cli", expires_at: datetime | None = None
) -> str:
    """Create the user if needed and return a new token for it (the only time it is visible)."""
    token = new_token()
    user = get_or_create_user(session, user_name)
    register_token(session, user, token, label, expires_at=expires_at)
    return token


_TOKEN_COLUMNS = tuple(ApiToken.__table__.columns)
_USER_COLUMNS = tuple(User.__table__.columns)
# Built once: every authenticated request runs it.
_TOKEN_AND_USER = (
    select(*_TOKEN_COLUMNS, *_USER_COLUMNS)
    .join_from(ApiToken, User, User.id == ApiToken.user_id)
    .where(ApiToken.token_hash == bindparam("token_hash"))
)


def token_for(session: Session, token: str, now: datetime) -> tuple[ApiToken, User] | None:
    """The live (known, unexpired) token row for a presented token, with its user (one query).

    Read as plain columns into objects outside the session (every request pays for this: the
    ORM's loading costs twice the rest, benchmarks/list_cpu.py); they are for reading, and
    `record_use` writes by id."""
    found = session.connection().execute(_TOKEN_AND_USER, {"token_hash": hash_token(token)})
    values = found.first()
    if values is None:
        return None
    split = len(_TOKEN_COLUMNS)
    row = ApiToken(**{c.key: v for c, v in zip(_TOKEN_COLUMNS, values[:split], strict=True)})
    user = User(**{c.key: v for c, v in zip(_USER_COLUMNS, values[split:], strict=True)})
    if row.expires_at is not None and row.expires_at <= now:
        return None
    return row, user


def user_for_token(session: Session, token: str) -> User | None:
    found = token_for(session, token, utcnow())
    return found[1] if found else None


def use_due(row: ApiToken, now: datetime) -> bool:
    """Whether this use is to be recorded: last_used_at unset or LAST_USED_RESOLUTION old."""
    last = row.last_used_at
    return last is None or now - last >= LAST_USED_RESOLUTION


def record_use(session: Session, row: ApiToken, now: datetime) -> None:
    """Set last_used_at, unless it was set less than LAST_USED_RESOLUTION ago."""
    if not use_due(row, now):
        return
    session.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))


def list_tokens(session: Session, user_id: str) -> list[ApiToken]:
    query = select(ApiToken).where(ApiToken.user_id == user_id).order_by(ApiToken.created_at)
    return list(session.scalars(query))


class TokenNotFound(LookupError):
    """No such token among the user's own."""


class BootstrapToken(Exception):
    """The admin's start-up token comes from configuration; revoking it here would not last."""


def revoke_token(session: Session, user_id: str, token_id: str) -> None:
    row = session.get(ApiToken, token_id)
    if row is None or row.user_id != user_id:
        raise TokenNotFound(token_id)
    if row.bootstrap:
        raise BootstrapToken(token_id)
    session.delete(row)


class WeakAdminToken(ValueError):
    """BATON_ADMIN_TOKEN is too short or too regular to withstand guessing."""


def estimated_bits(token: str) -> float:
    """Length times the Shannon entropy of the token's characters: a generous upper bound on
    the randomness of a human-chosen string, close for a random one."""
    counts = Counter(token)
    per_char = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return per_char * len(token)


def check_admin_token(token: str) -> None:
    """Raise WeakAdminToken (never quoting the token) unless it looks random enough."""
    if len(token) < MIN_ADMIN_TOKEN_CHARS:
        raise WeakAdminToken(
            f"BATON_ADMIN_TOKEN has {len(token)} characters; it needs at least "
            f"{MIN_ADMIN_TOKEN_CHARS} random ones ({ADMIN_TOKEN_ADVICE})"
        )
    if estimated_bits(token) < MIN_ADMIN_TOKEN_BITS:
        raise WeakAdminToken(
            f"BATON_ADMIN_TOKEN repeats too few characters to be random ({ADMIN_TOKEN_ADVICE})"
        )


def ensure_admin_token(session: Session, configured: str | None, token_file: Path) -> str:
    """Make BATON_ADMIN_TOKEN (or the 0600 token file, made on first start) the admin's
    bootstrap token, and retire any earlier bootstrap token, saying so. Only `baton serve` and
    `baton migrate` call this: no other command may rotate the admin's token."""
    if configured:
        check_admin_token(configured)
        token = configured
    elif token_file.exists():
        token = token_file.read_text().strip()
    else:
        token = new_token()
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    digest = hash_token(token)
    retired = session.execute(
        delete(ApiToken).where(ApiToken.bootstrap.is_(True), ApiToken.token_hash != digest)
    )
    if retired.rowcount:  # type: ignore[attr-defined]
        source = "BATON_ADMIN_TOKEN" if configured else f"the token file {token_file}"
        log.warning(
            "admin start-up token changed (now %s): the previous one no longer works", source
        )
    row = register_token(session, get_or_create_user(session, ADMIN_USER), token, "admin")
    row.bootstrap = True
    return token
