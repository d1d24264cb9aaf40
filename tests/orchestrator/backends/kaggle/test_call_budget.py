"""The engine and the Kaggle backend together keep to a call budget: over 10 emulated minutes of
a running job, at most one status call per 30 s, no kernel source fetched per tick, and a 429's
Retry-After waited out. The engine runs on a fake clock; the session runs for real."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.base import Backend
from orchestrator.backends.kaggle.backend import KaggleBackend
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.models import Job
from orchestrator.spec import JobSpec, KaggleSpec
from tests.factories import kaggle_spec
from tests.kaggle_emulator import Emulator, FaultKind
from tests.support.clock import ManualClock
from tests.support.kaggle import account_on

POLL = 30.0
RETRY_AFTER = 120


class _KaggleFor:
    """The registry's job, on the test's clock: one Kaggle backend per job, alice's account."""

    def __init__(self, emulator: Emulator, workdir: Path, clock: ManualClock) -> None:
        self.emulator, self.workdir, self.clock = emulator, workdir, clock

    def for_job(self, job: Job) -> Backend:
        options = KaggleSpec.model_validate(job.spec["kaggle"])
        return KaggleBackend(
            account_on(self.emulator),
            job.id,
            options,
            self.workdir / job.id,
            clock=self.clock.seconds,
            poll_seconds=POLL,
        )


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def test_ten_minutes_of_a_running_self_chained_job_stay_within_the_budget(
    emulator: Emulator, db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    engine = Engine(db, _KaggleFor(emulator, tmp_path / "kaggle", clock), tmp_path / "ckpt", clock)
    spec = kaggle_spec(
        {"self_chain": True, "enable_internet": True},
        total_steps=10**6,
        session={"limit_seconds": 3600, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with db.transaction() as session:
        user_id = get_or_create_user(session, ADMIN_USER).id
    engine.submit(user_id, JobSpec.model_validate(spec))

    seen: list[float] = []  # the engine's clock at each status call
    start = clock.seconds()
    for tick in range(600):
        if tick == 200:
            emulator.faults.retry_after_seconds = RETRY_AFTER
            emulator.faults.fail_next("GetKernelSessionStatus", FaultKind.RATE_LIMITED)
        before = len(emulator.calls("GetKernelSessionStatus"))
        engine.reconcile_all()
        seen += [clock.seconds() - start] * (len(emulator.calls("GetKernelSessionStatus")) - before)
        clock.advance(1)

    assert len(emulator.sessions()) == 1  # launched once, still running
    assert emulator.sessions()[0].ended_at is None
    assert 10 <= len(seen) <= 600 / POLL + 1
    gaps = [after - before for before, after in pairwise(seen)]
    assert min(gaps) >= POLL
    # The look after tick 200 got a 429 (refused before it counted as a call): the next one
    # came only after its Retry-After.
    assert ("GetKernelSessionStatus", FaultKind.RATE_LIMITED) in emulator.faults.injected
    after = next(i for i, at in enumerate(seen) if at >= 200)
    assert seen[after] - seen[after - 1] >= POLL + RETRY_AFTER
    # The kernel's source (GetKernel, about 1 MB) is read at most once: at launch, never per tick.
    assert len(emulator.calls("GetKernel")) <= 1
