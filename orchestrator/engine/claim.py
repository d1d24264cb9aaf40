"""The per-job claim: a lease (owner, expiry) on the job row, taken by compare-and-set.

Only the holder of an unexpired lease drives a job (launch, watch, collect, cancel). A holder
renews its lease from a background thread while it works; a holder that dies loses the lease at
its expiry, and the next one adopts the job's sessions through `find(launch_id)`. Works the same
on SQLite and PostgreSQL: one conditional UPDATE, checked by its rowcount.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import or_, update

from orchestrator.db import Database
from orchestrator.models import Job

DEFAULT_LEASE_SECONDS = 60.0


def new_owner_id() -> str:
    """Unique per engine instance: host, process and a random part."""
    return f"{socket.gethostname()[:48]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Claim:
    """A held claim. `held()` turns False once a renewal failed: stop before any side effect."""

    job_id: str
    _lost: threading.Event = field(default_factory=threading.Event)

    def held(self) -> bool:
        return not self._lost.is_set()


@dataclass
class Claims:
    db: Database
    clock: Callable[[], datetime]
    owner: str = field(default_factory=new_owner_id)
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def take(self, job_id: str) -> bool:
        now = self.clock()
        statement = (
            update(Job)
            .where(
                Job.id == job_id,
                or_(
                    Job.claim_owner.is_(None),
                    Job.claim_expires_at < now,
                    Job.claim_owner == self.owner,
                ),
            )
            .values(claim_owner=self.owner, claim_expires_at=self._expiry(now))
            .execution_options(synchronize_session=False)
        )
        with self.db.transaction() as session:
            return bool(session.execute(statement).rowcount == 1)  # type: ignore[attr-defined]

    def renew(self, job_id: str) -> bool:
        """Extend our lease; False if it expired or someone else holds the job now."""
        now = self.clock()
        statement = (
            update(Job)
            .where(Job.id == job_id, Job.claim_owner == self.owner, Job.claim_expires_at >= now)
            .values(claim_expires_at=self._expiry(now))
            .execution_options(synchronize_session=False)
        )
        with self.db.transaction() as session:
            return bool(session.execute(statement).rowcount == 1)  # type: ignore[attr-defined]

    def release(self, job_id: str) -> None:
        statement = (
            update(Job)
            .where(Job.id == job_id, Job.claim_owner == self.owner)
            .values(claim_owner=None, claim_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        with self.db.transaction() as session:
            session.execute(statement)

    @contextmanager
    def hold(self, job_id: str) -> Iterator[Claim | None]:
        """The claim on `job_id` for the block, or None if another owner holds it."""
        if not self.take(job_id):
            yield None
            return
        claim = Claim(job_id)
        done = threading.Event()
        renewer = threading.Thread(
            target=self._keep_renewing, args=(claim, done), name=f"claim-{job_id}", daemon=True
        )
        renewer.start()
        try:
            yield claim
        finally:
            done.set()
            renewer.join()
            if claim.held():
                self.release(job_id)

    def _keep_renewing(self, claim: Claim, done: threading.Event) -> None:
        while not done.wait(self.lease_seconds / 3):
            if not self.renew(claim.job_id):
                claim._lost.set()
                return

    def _expiry(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)
