"""SecretBox: round trip, key rotation, clear errors for bad keys, and the generated key file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from orchestrator.config import Settings
from orchestrator.secret_box import SecretBox, SecretBoxError, ensure_key_file, load_secret_box
from orchestrator.service import build_secret_box, prestart
from tests.factories import make_settings

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
SECRET = "kaggle-key-0123456789abcdef"


def test_round_trip_hides_the_plaintext() -> None:
    box = SecretBox.from_setting(KEY_A)
    token = box.encrypt(SECRET)
    assert SECRET not in token
    assert box.decrypt(token) == SECRET
    assert box.encrypt(SECRET) != token  # a fresh IV every time


def test_rotation_moves_every_secret_to_the_new_key() -> None:
    token = SecretBox.from_setting(KEY_A).encrypt(SECRET)

    both = SecretBox.from_setting(f"{KEY_B}, {KEY_A}")
    assert both.decrypt(token) == SECRET  # old tokens still open while both keys are configured
    rotated = both.rotate(token)

    assert SecretBox.from_setting(KEY_B).decrypt(rotated) == SECRET
    with pytest.raises(SecretBoxError, match="BATON_SECRET_KEYS") as error:
        SecretBox.from_setting(KEY_A).decrypt(rotated)
    assert "rotate-secret-keys" in str(error.value)


def test_new_secrets_are_encrypted_with_the_first_key() -> None:
    token = SecretBox.from_setting(f"{KEY_B},{KEY_A}").encrypt(SECRET)
    assert SecretBox.from_setting(KEY_B).decrypt(token) == SECRET
    with pytest.raises(SecretBoxError):
        SecretBox.from_setting(KEY_A).decrypt(token)


@pytest.mark.parametrize("token", ["", "not a token", "gAAAAA" + "x" * 80, "ünïcode"])
def test_a_token_no_key_opens_is_a_clear_error(token: str) -> None:
    box = SecretBox.from_setting(KEY_A)
    with pytest.raises(SecretBoxError, match="no key in BATON_SECRET_KEYS can decrypt"):
        box.decrypt(token)
    with pytest.raises(SecretBoxError):
        box.rotate(token)


BAD_SETTINGS = [
    ("not base64", "this-is-not-a-fernet-key", "key 1 of 1"),
    ("too short", "c2hvcnQ=", "key 1 of 1"),
    ("second key bad", f"{KEY_A},hunter2-hunter2", "key 2 of 2"),
    ("empty", "", "holds no key"),
    ("only commas", " , ,", "holds no key"),
]


@pytest.mark.parametrize(
    ("case", "value", "message"), BAD_SETTINGS, ids=[case[0] for case in BAD_SETTINGS]
)
def test_bad_key_settings_fail_naming_the_setting_not_the_value(
    tmp_path: Path, case: str, value: str, message: str
) -> None:
    settings = make_settings(tmp_path / "data", secret_keys=value)
    with pytest.raises(SecretBoxError, match=message) as error:
        prestart(settings)
    assert "BATON_SECRET_KEYS" in str(error.value)
    for key in value.split(","):
        if key.strip():
            assert key.strip() not in str(error.value)
    assert not (tmp_path / "data" / "baton.db").exists()  # checked before anything else


def test_repr_shows_no_key() -> None:
    box = SecretBox.from_setting(f"{KEY_A},{KEY_B}")
    assert repr(box) == "SecretBox(source='BATON_SECRET_KEYS', keys=2)"


def test_unset_setting_generates_a_private_key_file_once(settings: Settings) -> None:
    assert settings.secret_keys is None
    prestart(settings)
    key_file = settings.secret_key_file
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    Fernet(key)  # a valid key

    prestart(settings)  # a restart keeps the key, so stored secrets still open
    assert key_file.read_text().strip() == key
    token = build_secret_box(settings).encrypt(SECRET)
    assert SecretBox.from_setting(key).decrypt(token) == SECRET
    assert [p.name for p in key_file.parent.iterdir() if p.name.startswith(".secret-key-")] == []


def test_configured_keys_win_over_the_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    ensure_key_file(key_file)
    token = load_secret_box(KEY_A, key_file).encrypt(SECRET)
    assert SecretBox.from_setting(KEY_A).decrypt(token) == SECRET


def test_a_corrupt_key_file_is_named_in_the_error(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_text("garbage\n")
    with pytest.raises(SecretBoxError, match=str(key_file)):
        load_secret_box(None, key_file)
