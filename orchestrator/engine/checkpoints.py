"""The checkpoint store: where a job's committed checkpoints live, which one to resume from.

A checkpoint is resumed from only if it verifies against its manifest right before the launch.
One that does not is marked rejected (with the reason, and an event) and the next older one that
verifies is used instead, so a corrupt newest checkpoint costs no session. Only the newest
`keep` good checkpoints of a job keep their files; older ones keep their row and manifest.

A checkpoint a session published where the next one mounts it is kept here as a *stub* (its
manifest and where it lies, worker/boundary/transport.py); `hold` fetches its files through
the backend when they are needed here (a download, a move to another backend).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Select, UnaryExpression, select, update
from sqlalchemy.orm import Session

from orchestrator.backends.base import Rejected
from orchestrator.db import Database
from orchestrator.models import Checkpoint
from orchestrator.transitions import record_event
from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import CorruptCheckpoint, Manifest
from worker.boundary.text import TEXT_LIMIT
from worker.boundary.transport import read_remote, verify_stored

log = logging.getLogger(__name__)


# A backend's `fetch_checkpoint`: a stub at this path into its files here; the bytes fetched.
FetchCheckpoint = Callable[[Path, CheckpointRef], int]


class NoUsableCheckpoint(Exception):
    """The job has committed checkpoints, but none of them verifies any more."""


@dataclass
class CheckpointStore:
    db: Database
    root: Path
    keep: int = 2

    def path(self, job_id: str, segment_index: int) -> Path:
        return self.root / job_id / f"{segment_index:05d}"

    def resume_point(self, job_id: str) -> CheckpointRef | None:
        """The newest checkpoint that verifies now; None when the job has none at all."""
        with self.db.transaction() as session:
            candidates = [
                (row.segment_index, row.step)
                for row in session.scalars(_good(job_id).order_by(*_newest_first()))
            ]
        for segment_index, step in candidates:
            problem = self.verify(job_id, segment_index, step)
            if problem is None:
                return CheckpointRef(job_id, segment_index, step)
            self.reject(job_id, segment_index, problem)
        if candidates:
            raise NoUsableCheckpoint(f"none of the job's {len(candidates)} checkpoints verifies")
        return None

    def verify(self, job_id: str, segment_index: int, step: int) -> str | None:
        """Why the stored copy is unusable, or None if it verifies."""
        expect = CheckpointRef(job_id, segment_index, step)
        try:
            verify_stored(self.path(job_id, segment_index), expect)
        except CorruptCheckpoint as exc:
            return str(exc)
        return None

    def hold(self, ref: CheckpointRef, fetch: FetchCheckpoint) -> int:
        """Make sure the store holds the files of `ref`, fetching a stub's through `fetch`; the
        bytes fetched (0 when held already). A copy that cannot be fetched intact is rejected
        and never used: CorruptCheckpoint. Backend errors (Transient, Rejected) pass through;
        Rejected too where `fetch` cannot reach the files at all."""
        path = self.path(ref.job_id, ref.segment_index)
        try:
            if read_remote(path) is None:
                return 0
            fetched = fetch(path, ref)
            if read_remote(path) is not None:
                # A backend other than the one the files lie on (a job moved off Kaggle).
                raise Rejected(
                    f"the files of step {ref.step} lie where the job's backend cannot fetch them"
                )
        except CorruptCheckpoint as exc:
            self.reject(ref.job_id, ref.segment_index, f"its files could not be fetched: {exc}")
            raise
        if fetched:
            with self.db.transaction() as session:
                record_event(
                    session,
                    ref.job_id,
                    "checkpoint_fetched",
                    segment_index=ref.segment_index,
                    message=f"fetched the checkpoint at step {ref.step} to this machine, every "
                    f"file verified ({fetched / 1e6:.1f} MB through the orchestrator's link)",
                )
        return fetched

    def held_resume_point(self, job_id: str, fetch: FetchCheckpoint) -> CheckpointRef | None:
        """The newest checkpoint that verifies, with its files here (a stub's fetched): what a
        job resumes from on a backend other than the one its files lie on. None when it has
        none; NoUsableCheckpoint when none is left that verifies or can be fetched."""
        rejected = 0
        while True:
            ref = self.resume_point(job_id)
            if ref is None and rejected:
                # Never from scratch in place of checkpoints that could not be fetched.
                raise NoUsableCheckpoint(f"{rejected} checkpoint(s) could not be fetched intact")
            if ref is None:
                return None
            try:
                self.hold(ref, fetch)
            except CorruptCheckpoint:
                rejected += 1
                continue  # rejected: the next older one
            return ref

    def reject(self, job_id: str, segment_index: int, problem: str) -> None:
        with self.db.transaction() as session:
            row = session.scalars(
                select(Checkpoint).where(
                    Checkpoint.job_id == job_id, Checkpoint.segment_index == segment_index
                )
            ).first()
            if row is None or row.rejected is not None:
                return
            session.execute(
                update(Checkpoint)
                .where(Checkpoint.id == row.id)
                .values(rejected=problem[:TEXT_LIMIT])
            )
            record_event(
                session,
                job_id,
                "checkpoint_rejected",
                segment_index=segment_index,
                message=f"checkpoint at step {row.step} failed verification ({problem}); "
                "resuming from the newest older checkpoint that verifies",
            )
        log.warning("job %s: checkpoint of segment %d rejected: %s", job_id, segment_index, problem)

    def record(
        self, session: Session, job_id: str, segment_index: int, step: int, manifest: Manifest
    ) -> None:
        session.add(
            Checkpoint(
                job_id=job_id,
                segment_index=segment_index,
                step=step,
                location=str(self.path(job_id, segment_index)),
                model_digest=manifest.model_digest,
                bytes=manifest.total_bytes,
                manifest=manifest.to_dict(),
            )
        )

    def prune(self, job_id: str, keep: int | None = None) -> None:
        """Drop the files of all but the newest `keep` (default: the store's) good checkpoints,
        and of rejected ones."""
        with self.db.transaction() as session:
            older = session.scalars(
                select(Checkpoint.location)
                .where(Checkpoint.job_id == job_id, Checkpoint.rejected.is_(None))
                .order_by(*_newest_first())
                .offset(self.keep if keep is None else keep)
            ).all()
            rejected = session.scalars(
                select(Checkpoint.location).where(
                    Checkpoint.job_id == job_id, Checkpoint.rejected.is_not(None)
                )
            ).all()
        for location in [*older, *rejected]:
            shutil.rmtree(location, ignore_errors=True)


def _good(job_id: str) -> Select[Checkpoint]:
    return select(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.rejected.is_(None))


def _newest_first() -> tuple[UnaryExpression[int], UnaryExpression[int]]:
    return (Checkpoint.step.desc(), Checkpoint.segment_index.desc())
