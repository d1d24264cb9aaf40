"""Kaggle credentials in the database: stored encrypted, loaded, deleted, rotated; and their CLI."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from cryptography.fernet import Fernet
from sqlalchemy import delete

from orchestrator.api.main import create_app
from orchestrator.auth import get_or_create_user, issue_token
from orchestrator.cli import main
from orchestrator.config import Settings
from orchestrator.credentials import (
    KaggleCredentials,
    delete_kaggle_credentials,
    load_kaggle_credentials,
    rotate_all,
    store_kaggle_credentials,
)
from orchestrator.db import Database
from orchestrator.models import KaggleCredential, User
from orchestrator.secret_box import SecretBox, SecretBoxError
from orchestrator.service import build_services, prestart
from tests.support.marks import starts_processes
from tests.support.ports import free_port

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
KAGGLE_KEY = "0123456789abcdef0123456789abcdef"


def _user(store: Database, name: str) -> str:
    with store.transaction() as session:
        return get_or_create_user(session, name).id


def test_store_then_load_round_trips_and_stores_no_plaintext(store: Database) -> None:
    box = SecretBox.from_setting(KEY_A)
    alice = _user(store, "alice")
    with store.transaction() as session:
        store_kaggle_credentials(session, box, alice, "alice-k", KAGGLE_KEY)
    with store.transaction() as session:
        row = session.get(KaggleCredential, alice)
        assert row is not None
        assert KAGGLE_KEY not in row.key_ciphertext
        assert load_kaggle_credentials(session, box, alice) == KaggleCredentials(
            "alice-k", KAGGLE_KEY
        )


def test_store_replaces_and_delete_forgets(store: Database) -> None:
    box = SecretBox.from_setting(KEY_A)
    alice = _user(store, "alice")
    with store.transaction() as session:
        store_kaggle_credentials(session, box, alice, "old-name", "old-key")
        store_kaggle_credentials(session, box, alice, "new-name", KAGGLE_KEY)
    with store.transaction() as session:
        assert load_kaggle_credentials(session, box, alice) == KaggleCredentials(
            "new-name", KAGGLE_KEY
        )
        assert delete_kaggle_credentials(session, alice) is True
        assert delete_kaggle_credentials(session, alice) is False
        assert load_kaggle_credentials(session, box, alice) is None


def test_deleting_a_user_deletes_their_credentials(store: Database) -> None:
    alice = _user(store, "alice")
    with store.transaction() as session:
        store_kaggle_credentials(session, SecretBox.from_setting(KEY_A), alice, "a", KAGGLE_KEY)
    with store.transaction() as session:
        session.execute(delete(User).where(User.id == alice))
    with store.transaction() as session:
        assert session.get(KaggleCredential, alice) is None


def test_rotate_all_moves_every_row_to_the_first_key(store: Database) -> None:
    old = SecretBox.from_setting(KEY_A)
    users = [_user(store, name) for name in ("alice", "bob")]
    with store.transaction() as session:
        for user_id in users:
            store_kaggle_credentials(session, old, user_id, f"k-{user_id}", KAGGLE_KEY)
    with store.transaction() as session:
        assert rotate_all(session, SecretBox.from_setting(f"{KEY_B},{KEY_A}")) == 2
    new_only = SecretBox.from_setting(KEY_B)
    with store.transaction() as session:
        for user_id in users:
            loaded = load_kaggle_credentials(session, new_only, user_id)
            assert loaded == KaggleCredentials(f"k-{user_id}", KAGGLE_KEY)
        with pytest.raises(SecretBoxError, match="BATON_SECRET_KEYS"):
            load_kaggle_credentials(session, old, users[0])


def test_rotate_all_without_the_old_key_fails_and_changes_nothing(store: Database) -> None:
    alice = _user(store, "alice")
    with store.transaction() as session:
        store_kaggle_credentials(session, SecretBox.from_setting(KEY_A), alice, "a", KAGGLE_KEY)
    with pytest.raises(SecretBoxError, match=f"user {alice}"), store.transaction() as session:
        rotate_all(session, SecretBox.from_setting(KEY_B))
    with store.transaction() as session:
        assert load_kaggle_credentials(session, SecretBox.from_setting(KEY_A), alice) is not None


def test_repr_and_str_hide_the_key() -> None:
    credentials = KaggleCredentials("alice-k", KAGGLE_KEY)
    for text in (repr(credentials), str(credentials), f"{credentials}", repr([credentials])):
        assert KAGGLE_KEY not in text
        assert "alice-k" in text


# --- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`baton` commands in this process see the test's data dir and keys."""
    monkeypatch.setenv("BATON_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("BATON_SECRET_KEYS", KEY_A)
    return Settings(data_dir=settings.data_dir, secret_keys=KEY_A)


@pytest.fixture
@starts_processes
def server_url(cli_env: Settings) -> Iterator[str]:
    """A real HTTP server, as `baton serve` runs it, for the commands that use the API."""
    prestart(cli_env)
    services = build_services(cli_env, embedded_loop=False)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(services), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a hang guard
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join()
    services.db.dispose()


def _alice_token(settings: Settings) -> tuple[str, str]:
    store = Database(settings.resolved_database_url)
    with store.transaction() as session:
        token = issue_token(session, "alice")
        user_id = get_or_create_user(session, "alice").id
    store.dispose()
    return token, user_id


def _stored(settings: Settings, user_id: str, box: SecretBox) -> KaggleCredentials | None:
    store = Database(settings.resolved_database_url)
    with store.transaction() as session:
        loaded = load_kaggle_credentials(session, box, user_id)
    store.dispose()
    return loaded


def test_cli_stores_the_key_from_stdin_for_the_tokens_user(
    cli_env: Settings,
    server_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token, alice = _alice_token(cli_env)
    monkeypatch.setenv("BATON_TOKEN", token)
    monkeypatch.setattr(sys, "stdin", io.StringIO(KAGGLE_KEY + "\n"))
    assert main(["--url", server_url, "kaggle-credentials", "--username", "alice-k"]) == 0
    assert "stored Kaggle credentials for alice-k" in capsys.readouterr().out
    box = SecretBox.from_setting(KEY_A)
    assert _stored(cli_env, alice, box) == KaggleCredentials("alice-k", KAGGLE_KEY)


def test_cli_reads_the_key_from_a_file(
    cli_env: Settings, server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token, alice = _alice_token(cli_env)
    monkeypatch.setenv("BATON_TOKEN", token)
    key_file = tmp_path / "kaggle-key"
    key_file.write_text(KAGGLE_KEY + "\n")
    argv = ["--url", server_url, "kaggle-credentials", "--username", "a", "--key-file"]
    assert main([*argv, str(key_file)]) == 0
    assert _stored(cli_env, alice, SecretBox.from_setting(KEY_A)) == KaggleCredentials(
        "a", KAGGLE_KEY
    )


@pytest.mark.parametrize(
    ("username", "key", "field"),
    [("bad name!", KAGGLE_KEY, "username"), ("alice-k", "has a space " + KAGGLE_KEY, "key")],
)
def test_cli_rejects_bad_input_naming_the_field_not_the_key(
    cli_env: Settings, monkeypatch: pytest.MonkeyPatch, username: str, key: str, field: str
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(key))
    with pytest.raises(SystemExit) as exit_:
        main(["kaggle-credentials", "--username", username])
    message = str(exit_.value.code)
    assert message.startswith("invalid Kaggle credentials: " + field)
    assert KAGGLE_KEY not in message


@pytest.mark.parametrize("flag", ["--key", "--key-f"])
def test_cli_has_no_way_to_take_the_key_from_argv(
    cli_env: Settings, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A usage error (no such option), before anything is read or sent.
    assert main(["kaggle-credentials", "--username", "a", flag, KAGGLE_KEY]) == 2
    assert KAGGLE_KEY not in capsys.readouterr().err


def test_cli_names_no_path_when_the_key_file_is_missing(cli_env: Settings, tmp_path: Path) -> None:
    missing = tmp_path / KAGGLE_KEY
    with pytest.raises(SystemExit) as exit_:
        main(["kaggle-credentials", "--username", "a", "--key-file", str(missing)])
    assert exit_.value.code == "cannot read --key-file: No such file or directory"


def test_cli_rotate_secret_keys_reencrypts_and_prints_the_count(
    cli_env: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prestart(cli_env)
    _, alice = _alice_token(cli_env)
    store = Database(cli_env.resolved_database_url)
    with store.transaction() as session:
        store_kaggle_credentials(session, SecretBox.from_setting(KEY_A), alice, "a", KAGGLE_KEY)
    store.dispose()

    monkeypatch.setenv("BATON_SECRET_KEYS", f"{KEY_B},{KEY_A}")
    assert main(["rotate-secret-keys"]) == 0
    assert "re-encrypted 1 stored credential(s)" in capsys.readouterr().out
    expected = KaggleCredentials("a", KAGGLE_KEY)
    assert _stored(cli_env, alice, SecretBox.from_setting(KEY_B)) == expected


def test_cli_reports_a_bad_key_setting_without_a_traceback(
    cli_env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATON_SECRET_KEYS", "not-a-key")
    with pytest.raises(SystemExit) as exit_:
        main(["rotate-secret-keys"])
    message = str(exit_.value.code)
    assert message.startswith("baton: BATON_SECRET_KEYS: key 1 of 1 is not a valid Fernet key")
    assert "not-a-key" not in message
