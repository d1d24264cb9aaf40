"""Capacity is admission: a launch needs a free place in its backend's slot.

A slot (`Backend.slot`) is a pool of concurrent sessions shared by every job whose backend names
the same key: one host's local slots, one Kaggle account's GPU sessions. Admission counts the
active segments holding the key and lets queued jobs in fairly across users: the user with the
fewest jobs running plus admitted ahead goes next, first come first served among equals, so a
second user's first job takes the next free slot however many the first user queued. It runs
inside the transaction that records the launch intent, serialized per key, so two workers never
over-admit.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from orchestrator.backends.base import Slot
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, JobState
from orchestrator.models import Job, Segment


@dataclass(frozen=True)
class Admission:
    admitted: bool
    reason: str | None = None  # why not, in words the user sees


def fair_order(jobs: list[tuple[str, str]], running: Mapping[str, int] | None = None) -> list[str]:
    """Job ids in admission order, from (job_id, user_id) pairs oldest first and each user's
    jobs already running in the slot.

    A user's k-th waiting job (from 0) ranks as running + k: the user with the smallest share
    of the slot goes next; among equal shares, the job submitted first.
    """
    share: dict[str, int] = defaultdict(int, running or {})
    ranked = []
    for position, (job_id, user_id) in enumerate(jobs):
        ranked.append((share[user_id], position, job_id))
        share[user_id] += 1
    return [job_id for _, _, job_id in sorted(ranked)]


def serialize_admissions(session: Session, key: str) -> None:
    """Hold the per-key admission lock until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock. SQLite has one writer at a time, and the
    caller's first statement is a write, which already holds it.
    """
    if session.get_bind().dialect.name == "postgresql":
        lock_id = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})


def admit(session: Session, job_id: str, slot: Slot) -> Admission:
    in_use = session.scalar(
        select(func.count(Segment.id)).where(
            Segment.slot_key == slot.key,
            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
        )
    )
    free = slot.limit - int(in_use or 0)
    if free <= 0:
        return Admission(False, f"waiting for a free session slot ({in_use} of {slot.limit} busy)")
    waiting = session.execute(
        select(Job.id, Job.user_id)
        .where(Job.slot_key == slot.key, Job.state == JobState.QUEUED.value)
        .order_by(Job.created_at, Job.id)
    ).all()
    running = session.execute(
        select(Job.user_id, func.count(Segment.id))
        .join(Job, Job.id == Segment.job_id)
        .where(
            Segment.slot_key == slot.key,
            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
        )
        .group_by(Job.user_id)
    ).all()
    order = fair_order(
        [(row[0], row[1]) for row in waiting], {user: int(count) for user, count in running}
    )
    ahead = order.index(job_id) if job_id in order else 0
    if ahead >= free:
        return Admission(False, f"waiting for a free session slot ({ahead} queued ahead)")
    return Admission(True)
