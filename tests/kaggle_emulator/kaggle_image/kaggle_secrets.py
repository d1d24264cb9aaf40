"""The emulator's stand-in for Kaggle's `kaggle_secrets` module (from Kaggle's docker image).

    from kaggle_secrets import UserSecretsClient
    value = UserSecretsClient().get_secret("LABEL")

Kaggle's client asks its backend for the secret with the session's token; this one reads the
values the emulator wrote for the session (only the secrets attached to the kernel). The
exception classes and the message for a secret that is not attached follow Kaggle's
(Kaggle/docker-python patches/kaggle_secrets.py, and the error users report).
"""

from __future__ import annotations

import json
import os

# Set by the emulator in every session: the path of the session's 0600 values file.
VALUES_FILE_ENV = "BATON_EMULATOR_USER_SECRETS"


class CredentialError(Exception):
    pass


class BackendError(Exception):
    pass


class ValidationError(Exception):
    pass


class UserSecretsClient:
    def __init__(self) -> None:
        path = os.environ.get(VALUES_FILE_ENV)
        if not path:
            # Kaggle's client raises this when the session has no KAGGLE_USER_SECRETS_TOKEN.
            raise CredentialError(
                "A JWT Token is required to use the UserSecretsClient, but none found in "
                f"environment variable {VALUES_FILE_ENV}"
            )
        self._path = path

    def get_secret(self, label: str) -> str:
        """The value of the secret with this label, if it is attached to the running kernel."""
        if not label:
            raise ValidationError("Label must be non-empty.")
        with open(self._path) as f:
            granted = json.load(f)
        secrets = granted["secrets"]
        if label not in secrets:
            response = {
                "errors": [
                    f"No user secrets exist for kernel id {granted['kernelId']} and label {label}."
                ],
                "error": {"code": 5},
                "wasSuccessful": False,
            }
            raise BackendError(f"Unexpected response from the service. Response: {response}.")
        value: str = secrets[label]
        return value
