"""Picks the backend for a job: the shared local one, a Kaggle one on its owner's account, or a
Slurm one with the job's `slurm:` options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.backends.base import Backend, Rejected
from orchestrator.backends.kaggle.backend import POLL_SECONDS, KaggleBackend
from orchestrator.backends.slurm.backend import SlurmSite
from orchestrator.credentials import load_kaggle_credentials
from orchestrator.db import Database
from orchestrator.models import Job
from orchestrator.secret_box import SecretBox
from orchestrator.spec import stored_spec
from worker.kaggle_access.client import (
    DEFAULT_TIMEOUT_SECONDS,
    ClientFactory,
    KaggleAccount,
    production_client,
)


class BackendResolver(Protocol):
    def for_job(self, job: Job) -> Backend: ...


class StaticBackends:
    """Backends by name, the same instance for every job (the local backend, tests)."""

    def __init__(self, backends: Mapping[str, Backend]) -> None:
        self.backends = dict(backends)

    def for_job(self, job: Job) -> Backend:
        return self.backends[job.backend]


class Backends:
    def __init__(
        self,
        local: Backend,
        db: Database,
        box: SecretBox,
        kaggle_dir: Path,
        kaggle_clients: ClientFactory = production_client,
        kaggle_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        kaggle_poll: float = POLL_SECONDS,
        trainer_paths: Sequence[Path] = (),
        slurm: SlurmSite | None = None,
    ) -> None:
        self.slurm = slurm
        self.kaggle_poll = kaggle_poll
        self.trainer_paths = list(trainer_paths)
        self.local = local
        self.db = db
        self.box = box
        self.kaggle_dir = kaggle_dir
        self.kaggle_clients = kaggle_clients
        self.kaggle_timeout = kaggle_timeout

    def for_job(self, job: Job) -> Backend:
        if job.backend == "slurm":
            if self.slurm is None:
                raise Rejected("this orchestrator has no Slurm site configured")
            slurm = stored_spec(job.spec).slurm
            assert slurm is not None  # a Slurm job's spec always has its options
            return self.slurm.backend(slurm)
        if job.backend != "kaggle":
            return self.local
        with self.db.transaction() as session:
            credentials = load_kaggle_credentials(session, self.box, job.user_id)
        if credentials is None:
            raise Rejected("no Kaggle credentials are stored for the job's owner")
        account = KaggleAccount(
            credentials.username, credentials.key, self.kaggle_clients, self.kaggle_timeout
        )
        options = stored_spec(job.spec).kaggle
        assert options is not None  # a Kaggle job's spec always has its options
        return KaggleBackend(
            account,
            job.id,
            options,
            self.kaggle_dir / job.id,
            poll_seconds=self.kaggle_poll,
            trainer_paths=self.trainer_paths,
        )
