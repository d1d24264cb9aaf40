"""Settings, read from BATON_* environment variables (pydantic-settings)."""

from __future__ import annotations

import os
import socket
from functools import cached_property
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.webhooks import Networks, parse_networks


def _top_level_names(directory: Path) -> set[str]:
    """Packages (directories with __init__.py) and modules directly inside `directory`."""
    names = set()
    for entry in directory.iterdir():
        if entry.is_dir() and (entry / "__init__.py").is_file() and entry.name.isidentifier():
            names.add(entry.name)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            names.add(entry.stem)
    return names


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("baton"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None  # default: SQLite in data_dir
    admin_token: SecretStr | None = None
    reconcile_interval_seconds: float = Field(default=1.0, gt=0)
    # How often `baton serve` looks for webhook notifications to send (or retry).
    notify_interval_seconds: float = Field(default=2.0, gt=0)
    # Webhooks may reach public addresses only, plus these networks (comma-separated CIDRs,
    # e.g. 127.0.0.0/8 for a receiver on this host). Checked against the address connected to.
    webhook_allowed_networks: str = ""
    # One POST's whole time: connect, send and the answer's head.
    webhook_deadline_seconds: float = Field(default=10.0, gt=0, le=120)
    # POSTs in flight at once, in all and per user.
    webhook_concurrency: int = Field(default=16, ge=1, le=256)
    webhook_per_user: int = Field(default=4, ge=1, le=256)
    # Concurrent local sessions on this host; jobs beyond it wait in `queued`. Default: one per
    # core.
    local_slots: int | None = Field(default=None, ge=1, le=1024)
    # How long a job's claim lasts unless its holder renews it; a dead holder's jobs are adopted
    # by another orchestrator after this.
    claim_lease_seconds: float = Field(default=60.0, ge=1)
    # Local sessions get SIGKILL this long after SIGTERM at their limit.
    kill_grace_seconds: float = Field(default=5.0, ge=0)
    # Python that runs local sessions; it needs the `train` extra (torch).
    worker_python: str | None = None
    # Local sessions are forked from one interpreter that imported torch once, instead of each
    # starting a new one: about 2.3 CPU-s and as much of every session's time saved
    # (orchestrator/backends/local/warm.py). Only for the orchestrator's own Python.
    local_warm_start: bool = True
    # Whether a Kaggle job with `kaggle.on_quota_exhausted: local` may continue on this
    # machine's local backend when its Kaggle quota runs out (it then uses a local slot).
    allow_local_fallback: bool = False
    # Committed checkpoints of each job kept on disk (the newest ones); at least the latest.
    keep_checkpoints: int = Field(default=2, ge=1, le=1000)
    # The longest a single Kaggle API call may take (the client itself never times out).
    kaggle_call_timeout_seconds: float = Field(default=60.0, gt=0)
    # How often a running Kaggle session's status is read: Kaggle's rate limits are not
    # published, so every running job costs one call per this many seconds.
    kaggle_poll_seconds: float = Field(default=30.0, gt=0)
    # Where Slurm segments' session directories go: a path the submit host and every compute
    # node see alike (a shared filesystem). Default: data_dir/slurm (docs/slurm.md).
    slurm_sessions_dir: Path | None = None
    # How often a Slurm segment's job is looked at (one scontrol call each).
    slurm_poll_seconds: float = Field(default=5.0, gt=0)
    # Comma-separated Fernet keys that encrypt stored credentials: the first encrypts, all
    # decrypt. Production sets it; unset, a key is generated into data_dir/secret.key.
    secret_keys: SecretStr | None = None
    # Who reconciles: the loop inside `baton serve`, or Celery workers and beat (at scale).
    reconciler: Literal["embedded", "celery"] = "embedded"
    # The Celery broker (orchestrator/tasks.py).
    broker_url: str = "redis://127.0.0.1:6379/0"
    # The host whose workers run local sessions; local jobs' tasks go to its queue only.
    local_host: str = Field(default_factory=socket.gethostname)
    # How often beat fans out the ids of jobs due for attention.
    beat_interval_seconds: float = Field(default=1.0, gt=0)
    # A job's reconcile message may be sent again after this long even if it never ran.
    dispatch_guard_seconds: float = Field(default=30.0, gt=0)

    # Threads per API process for the handlers that wait on the database. Python threads share
    # one GIL, so a few serve more requests per second than many: on 2 cores, 40 threads gave 226
    # GET job/s and 4 gave 441 (benchmarks/load.py). Scale out with `baton serve --workers`.
    api_threads: int = Field(default=4, ge=1, le=256)
    # Requests with a larger body get 413 before anything reads it.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Top-level packages whose modules jobs may name as their trainer (comma-separated).
    trainer_packages: str = "trainers"
    # Directories of the operator's trainer code (os.pathsep-separated): every package or module
    # in them may be named too, and they are searched before the server's own import path.
    trainer_paths: str = ""

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        parse_networks(value)  # a bad network fails the start, naming the setting
        return value

    @property
    def webhook_networks(self) -> Networks:
        return parse_networks(self.webhook_allowed_networks)

    @property
    def trainer_path_dirs(self) -> list[Path]:
        return [Path(entry) for entry in self.trainer_paths.split(os.pathsep) if entry.strip()]

    @property
    def allowed_trainer_packages(self) -> set[str]:
        """The configured packages plus those found in the trainer paths."""
        allowed = {name.strip() for name in self.trainer_packages.split(",") if name.strip()}
        for directory in self.trainer_path_dirs:
            if directory.is_dir():
                allowed.update(_top_level_names(directory))
        return allowed

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'baton.db'}"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def resolved_slurm_sessions_dir(self) -> Path:
        return self.slurm_sessions_dir or self.data_dir / "slurm"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir / "checkpoints"

    @property
    def trackers_dir(self) -> Path:
        """TensorBoard runs, W&B offline runs and MLflow's local store (trackers: in a spec)."""
        return self.data_dir / "trackers"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin-token"

    @property
    def secret_key_file(self) -> Path:
        return self.data_dir / "secret.key"
