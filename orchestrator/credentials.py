"""Each user's Kaggle credentials: the input rules, and storage with the API key encrypted."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.models import KaggleCredential, utcnow
from orchestrator.secret_box import SecretBox, SecretBoxError


@dataclass(frozen=True)
class KaggleCredentials:
    """A user's decrypted Kaggle credentials, for a backend to authenticate with."""

    username: str
    key: str

    def __repr__(self) -> str:
        # Keeps the key out of logs, tracebacks and debug output that print this object.
        return f"KaggleCredentials(username={self.username!r}, key=<hidden>)"


def store_kaggle_credentials(
    session: Session, box: SecretBox, user_id: str, username: str, key: str
) -> KaggleCredential:
    """Create or replace the user's credentials (validate them with KaggleCredentialsIn first)."""
    row = session.get(KaggleCredential, user_id)
    if row is None:
        row = KaggleCredential(user_id=user_id, username=username, key_ciphertext="")
        session.add(row)
    row.username = username
    row.key_ciphertext = box.encrypt(key)
    row.updated_at = utcnow()
    session.flush()
    return row


def load_kaggle_credentials(
    session: Session, box: SecretBox, user_id: str
) -> KaggleCredentials | None:
    """The user's credentials, decrypted, or None. Raises SecretBoxError when no key opens them."""
    row = session.get(KaggleCredential, user_id)
    if row is None:
        return None
    return KaggleCredentials(row.username, box.decrypt(row.key_ciphertext))


def delete_kaggle_credentials(session: Session, user_id: str) -> bool:
    """Forget the user's credentials; False when there were none."""
    row = session.get(KaggleCredential, user_id)
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def rotate_all(session: Session, box: SecretBox) -> int:
    """Re-encrypt every stored key under the box's first key; returns how many rows."""
    count = 0
    for row in session.scalars(select(KaggleCredential).order_by(KaggleCredential.user_id)):
        try:
            row.key_ciphertext = box.rotate(row.key_ciphertext)
        except SecretBoxError as exc:
            raise SecretBoxError(f"Kaggle key of user {row.user_id}: {exc}") from None
        count += 1
    session.flush()
    return count
