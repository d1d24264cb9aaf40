"""Settings, read from BATON_* environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("baton"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None  # default: SQLite in data_dir
    admin_token: SecretStr | None = None
    reconcile_interval_seconds: float = Field(default=1.0, gt=0)
    # Local sessions get SIGKILL this long after SIGTERM at their limit.
    kill_grace_seconds: float = Field(default=5.0, ge=0)
    # Python that runs local sessions; it needs the `train` extra (torch).
    worker_python: str | None = None
    # Committed checkpoints of each job kept on disk (the newest ones); at least the latest.
    keep_checkpoints: int = Field(default=2, ge=1, le=1000)
    # The longest a single Kaggle API call may take (the client itself never times out).
    kaggle_call_timeout_seconds: float = Field(default=60.0, gt=0)
    # Comma-separated Fernet keys that encrypt stored credentials: the first encrypts, all
    # decrypt. Production sets it; unset, a key is generated into data_dir/secret.key.
    secret_keys: SecretStr | None = None

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'baton.db'}"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir / "checkpoints"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin-token"

    @property
    def secret_key_file(self) -> Path:
        return self.data_dir / "secret.key"
