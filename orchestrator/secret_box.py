"""Encrypts secrets at rest with rotatable Fernet keys: BATON_SECRET_KEYS, or a generated file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

SETTING = "BATON_SECRET_KEYS"


class SecretBoxError(Exception):
    """Bad key configuration, or a token that no configured key can open. Never holds a secret."""


class SecretBox:
    """Encrypts with the first key, decrypts with any, re-encrypts under the first on rotate."""

    def __init__(self, keys: list[str], source: str = SETTING) -> None:
        if not keys:
            raise SecretBoxError(f"{source} holds no key; give one or more comma-separated keys")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key))
            except ValueError:
                # Name the position only: the value is a secret and must not reach any log.
                raise SecretBoxError(
                    f"{source}: key {position} of {len(keys)} is not a valid Fernet key "
                    "(32 url-safe base64-encoded bytes, as `Fernet.generate_key()` makes)"
                ) from None
        self._fernet = MultiFernet(fernets)
        self._count = len(fernets)
        self.source = source

    @classmethod
    def from_setting(cls, value: str, source: str = SETTING) -> SecretBox:
        """Parse comma-separated keys; whitespace around them and empty entries are ignored."""
        return cls([key.strip() for key in value.split(",") if key.strip()], source)

    def __repr__(self) -> str:
        return f"SecretBox(source={self.source!r}, keys={self._count})"

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode("ascii")

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode()
        except (InvalidToken, UnicodeEncodeError):
            raise self._cannot_open() from None

    def rotate(self, token: str) -> str:
        """The same plaintext, encrypted under the first key."""
        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeEncodeError):
            raise self._cannot_open() from None

    def _cannot_open(self) -> SecretBoxError:
        return SecretBoxError(
            f"no key in {self.source} can decrypt this secret: was the key that encrypted it "
            "removed before `baton rotate-secret-keys` ran?"
        )


def ensure_key_file(path: Path) -> str:
    """Read the key in `path`, creating it (mode 0600) on first use; safe if two processes race."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a private temp file, then link it into place: the link fails if another process
        # got there first, and nobody ever reads a half-written key.
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(Fernet.generate_key().decode("ascii") + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(temp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temp)
    return path.read_text().strip()


def load_secret_box(configured: str | None, key_file: Path) -> SecretBox:
    """The box for BATON_SECRET_KEYS when set, else for the generated single-user key file."""
    if configured is not None:
        return SecretBox.from_setting(configured)
    return SecretBox.from_setting(ensure_key_file(key_file), source=str(key_file))
