"""Kaggle user secrets: values stored per account, labels attached per kernel.

On Kaggle a secret belongs to an account and a notebook reads it only once it is attached to
that notebook (Add-ons -> Secrets), a setting of the notebook that every version keeps. A session
gets the attached labels' values of the kernel owner's secrets, looked up when it starts.

Values never appear in a repr, a log line or an error message; only labels do.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from tests.kaggle_emulator.kaggle_image.kaggle_secrets import VALUES_FILE_ENV

__all__ = ["IMAGE_DIR", "VALUES_FILE", "VALUES_FILE_ENV", "UserSecrets", "write_values"]

# Written into the session root (outside working/, so never listed as output), mode 0600.
VALUES_FILE = "user-secrets.json"
# The stand-in for modules that Kaggle's docker image provides (kaggle_secrets).
IMAGE_DIR = Path(__file__).resolve().parent / "kaggle_image"


class UserSecrets:
    def __init__(self) -> None:
        self._values: dict[str, dict[str, str]] = defaultdict(dict)  # user -> label -> value
        self._attached: dict[str, set[str]] = defaultdict(set)  # "owner/slug" -> labels

    def __repr__(self) -> str:
        return f"UserSecrets(attached={ {k: sorted(v) for k, v in self._attached.items()} })"

    def set(self, user: str, label: str, value: str) -> None:
        _check_label(label)
        if not isinstance(value, str):
            raise TypeError(f"The value of secret {label!r} must be a str")
        self._values[user][label] = value

    def delete(self, user: str, label: str) -> None:
        self._values[user].pop(label, None)

    def attach(self, kernel_ref: str, label: str) -> None:
        """Attach a label to a kernel; allowed before its first push, kept by every version."""
        _check_label(label)
        owner, _, slug = kernel_ref.partition("/")
        if not owner or not slug or "/" in slug:
            raise ValueError(f"Invalid kernel ref {kernel_ref!r}; use owner/slug")
        self._attached[kernel_ref].add(label)

    def detach(self, kernel_ref: str, label: str) -> None:
        self._attached[kernel_ref].discard(label)

    def attached_labels(self, kernel_ref: str) -> set[str]:
        return set(self._attached.get(kernel_ref, ()))

    def for_kernel(self, kernel_ref: str) -> dict[str, str]:
        """The values a session of this kernel may read: its owner's secrets that are attached."""
        owner = kernel_ref.partition("/")[0]
        mine = self._values.get(owner, {})
        return {label: mine[label] for label in self.attached_labels(kernel_ref) if label in mine}


def _check_label(label: str) -> None:
    if not isinstance(label, str) or not label:
        raise ValueError("A secret's label must be a non-empty str")


def write_values(root: Path, kernel_id: int, values: Mapping[str, str]) -> Path:
    """Write a session's readable secrets into `root`, readable by the owner only."""
    path = root / VALUES_FILE
    payload = json.dumps({"kernelId": kernel_id, "secrets": dict(values)}).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file that already exists
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    return path
