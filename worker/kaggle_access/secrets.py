"""Reading a Kaggle Secret inside a kernel: the only place Baton touches `kaggle_secrets`."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)
# The Secret a user attaches with their Kaggle key, for what a kernel does through the API itself
# (self-chaining, the in-kernel transport, the wheel set, hearing pause and cancel).
SECRET_LABEL = "BATON_KAGGLE_KEY"
# What kaggle_secrets raises for a secret that is not attached, not allowed or not reachable.
_REFUSALS = ("CredentialError", "BackendError", "ValidationError")


def read_secret(label: str) -> str | None:
    """The secret's value, or None when the module or the attachment is missing."""
    try:
        module = importlib.import_module("kaggle_secrets")
    except ImportError:
        return None
    refusals = tuple(getattr(module, name) for name in _REFUSALS if hasattr(module, name))
    try:
        value = module.UserSecretsClient().get_secret(label)
    except (*refusals, ConnectionError) as exc:
        log.warning("Kaggle Secret %s is not readable (%s)", label, type(exc).__name__)
        return None
    return str(value) if value else None
