"""Tokens without the API: what a presented token resolves to, expiry to the second, revocation
of one's own tokens only, and the admin's bootstrap token. On a real (SQLite) database."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import (
    ADMIN_USER,
    TOKEN_PREFIX,
    BootstrapToken,
    TokenNotFound,
    WeakAdminToken,
    check_admin_token,
    ensure_admin_token,
    get_or_create_user,
    hash_token,
    issue_token,
    list_tokens,
    new_token,
    revoke_token,
    token_for,
    user_for_token,
)
from orchestrator.db import Database
from orchestrator.models import ApiToken

NOW = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def test_a_new_token_is_prefixed_and_carries_32_random_bytes() -> None:
    tokens = {new_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(t.startswith(TOKEN_PREFIX) and len(t) == len(TOKEN_PREFIX) + 43 for t in tokens)
    assert hash_token("bt_x") == hashlib.sha256(b"bt_x").hexdigest()


def test_a_token_resolves_to_its_user_until_it_expires(db: Database) -> None:
    with db.transaction() as session:
        lasting = issue_token(session, "alice")
        expiring = issue_token(session, "alice", "ci", expires_at=NOW + timedelta(hours=1))
        alice = get_or_create_user(session, "alice")
    with db.transaction() as session:
        assert token_for(session, lasting, NOW + timedelta(days=3650)) is not None
        found = token_for(session, expiring, NOW)
        assert found is not None
        row, user = found
        assert (row.user_id, row.name, user.id) == (alice.id, "ci", alice.id)
        assert token_for(session, expiring, NOW + timedelta(minutes=59)) is not None
        assert token_for(session, expiring, NOW + timedelta(hours=1)) is None  # expired at once
        assert token_for(session, "bt_unknown", NOW) is None
        user = user_for_token(session, lasting)
        assert user is not None
        assert user.name == "alice"
        assert user_for_token(session, "bt_unknown") is None


def test_an_expired_token_resolves_to_nobody(db: Database) -> None:
    with db.transaction() as session:
        token = issue_token(session, "bob", expires_at=datetime.now(UTC) - timedelta(seconds=1))
        assert user_for_token(session, token) is None
        [row] = session.scalars(select(ApiToken)).all()
        assert row.name == "cli"


def test_users_list_and_revoke_only_their_own_tokens(db: Database) -> None:
    with db.transaction() as session:
        first = issue_token(session, "alice", "first")
        issue_token(session, "alice", "second")
        bobs = issue_token(session, "bob")
        alice = get_or_create_user(session, "alice")
        bob = get_or_create_user(session, "bob")
    with db.transaction() as session:
        names = [row.name for row in list_tokens(session, alice.id)]
        assert names == ["first", "second"]
        [bob_row] = list_tokens(session, bob.id)
        with pytest.raises(TokenNotFound) as refused:
            revoke_token(session, alice.id, bob_row.id)
        assert refused.value.args == (bob_row.id,)
        with pytest.raises(TokenNotFound):
            revoke_token(session, alice.id, "tnope")
    with db.transaction() as session:
        assert user_for_token(session, bobs) is not None
        [first_row, _] = list_tokens(session, alice.id)
        revoke_token(session, alice.id, first_row.id)
    with db.transaction() as session:
        assert user_for_token(session, first) is None
        assert [row.name for row in list_tokens(session, alice.id)] == ["second"]


def test_the_bootstrap_token_cannot_be_revoked_and_a_new_one_retires_it(
    db: Database, tmp_path: Path
) -> None:
    with db.transaction() as session:
        old = ensure_admin_token(
            session, "bt_configured_old_0123456789abcdefghij", tmp_path / "admin-token"
        )
        admin = get_or_create_user(session, ADMIN_USER)
        [row] = list_tokens(session, admin.id)
        with pytest.raises(BootstrapToken) as refused:
            revoke_token(session, admin.id, row.id)
        assert refused.value.args == (row.id,)
    with db.transaction() as session:
        assert ensure_admin_token(
            session, "bt_configured_new_0123456789abcdefghij", tmp_path / "t"
        ) == ("bt_configured_new_0123456789abcdefghij")
        assert user_for_token(session, old) is None
        user = user_for_token(session, "bt_configured_new_0123456789abcdefghij")
        assert user is not None
        assert user.name == ADMIN_USER


def test_without_a_configured_token_the_admin_token_file_is_made_once_and_reused(
    db: Database, tmp_path: Path
) -> None:
    token_file = tmp_path / "data" / "admin-token"
    # An open umask: the file's own mode is checked, not a umask left by an earlier test (prestart
    # sets 077 for the whole process).
    umask = os.umask(0)
    try:
        with db.transaction() as session:
            first = ensure_admin_token(session, None, token_file)
    finally:
        os.umask(umask)
    assert first.startswith(TOKEN_PREFIX)
    assert token_file.read_text() == first + "\n"
    assert token_file.stat().st_mode & 0o777 == 0o600
    with db.transaction() as session:  # the next start reads the file
        assert ensure_admin_token(session, None, token_file) == first
        user = user_for_token(session, first)
        assert user is not None
        assert user.name == ADMIN_USER


def test_an_admin_token_of_32_random_characters_is_taken_and_a_weaker_one_is_told_why() -> None:
    check_admin_token("3f9a0c7e51d2b84e6a17c09f2d5e8b31")  # `openssl rand -hex 16`: 32 characters
    with pytest.raises(WeakAdminToken, match="has 31 characters; it needs at least 32"):
        check_admin_token("3f9a0c7e51d2b84e6a17c09f2d5e8b3")
    with pytest.raises(WeakAdminToken, match="repeats too few characters to be random"):
        check_admin_token("ab" * 20)
