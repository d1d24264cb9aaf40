"""The chained-versus-uninterrupted scenario for any trainer, through real `python -m worker` runs.

A job runs whole in one worker, and again as a chain of segments, each ended a real way: SIGTERM
once its log shows a step, its session deadline, or completion; each resumes from the previous
one's committed checkpoint. tests/trainers/test_chained_digest.py runs it for every trainer and
checks that the chain ends where the whole run did.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

from tests.support.segments import (
    make_root,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    terminate_after_step,
)
from worker.boundary.contract import Outcome, SegmentResult, SegmentSpec

T = TypeVar("T")


@dataclass(frozen=True)
class Sigterm:
    """SIGTERM once the log shows `step`, or `past_start` steps past the segment's start."""

    step: int | None = None
    past_start: int | None = None

    def target(self, start: int) -> int:
        if self.step is not None:
            return self.step
        assert self.past_start is not None
        return start + self.past_start


@dataclass(frozen=True)
class Deadline:
    """A limit of the whole run's start-up and load plus `seconds`: the segment ends on it."""

    seconds: float


@dataclass(frozen=True)
class Complete:
    """Run until the worker exits by itself."""


Stop = Sigterm | Deadline | Complete


@dataclass
class Chain:
    """A chain's segments in order: their specs, session roots and results."""

    specs: list[SegmentSpec] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)
    results: list[SegmentResult] = field(default_factory=list)

    @property
    def checkpoint(self) -> Path:
        """The last segment's committed checkpoint."""
        return output_checkpoint(self.roots[-1], self.specs[-1])

    @property
    def outcomes(self) -> list[str]:
        return [result.outcome for result in self.results]


def run_whole(spec: SegmentSpec, root: Path, timeout: float = 120) -> SegmentResult:
    """`spec` in one uninterrupted worker: it completes every step."""
    make_root(root, spec)
    finished = run_worker(root, timeout=timeout)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = read_result(root, spec)
    assert (result.outcome, result.end_step) == (Outcome.COMPLETED, spec.total_steps)
    return result


def run_segment(root: Path, spec: SegmentSpec, stop: Stop, timeout: float = 120) -> SegmentResult:
    """One segment in a prepared root, ended the way `stop` says; the worker exits 0."""
    if isinstance(stop, Sigterm):
        start = spec.expect.step if spec.expect else 0
        returncode = terminate_after_step(root, stop.target(start), timeout=timeout)
    else:
        returncode = run_worker(root, timeout=timeout).returncode
    assert returncode == 0
    return read_result(root, spec)


def segment_root(workdir: Path, index: int) -> Path:
    """Where run_chain lays out segment `index` of a chain in `workdir`."""
    return workdir / f"seg{index}"


def run_chain(
    spec: SegmentSpec,
    plan: list[Stop],
    workdir: Path,
    whole: SegmentResult,
    *,
    timeout: float = 120,
    start: Chain | None = None,
) -> Chain:
    """Segments of `spec` ended as `plan` says, each resuming from the one before, until one
    completes or the plan ends. `start`: segments already run, continued from its last."""
    chain = Chain(list(start.specs), list(start.roots), list(start.results)) if start else Chain()
    overhead = whole.timings.startup + whole.timings.load
    for index in range(len(chain.results), len(plan)):
        stop = plan[index]
        if chain.results:
            limit = overhead + stop.seconds if isinstance(stop, Deadline) else spec.limit_seconds
            segment = next_spec(chain.specs[-1], chain.results[-1], limit_seconds=limit)
            resume_from: Path | None = chain.checkpoint
        else:
            segment, resume_from = spec, None
        root = make_root(segment_root(workdir, index), segment, resume_from=resume_from)
        chain.specs.append(segment)
        chain.roots.append(root)
        chain.results.append(run_segment(root, segment, stop, timeout))
        if chain.results[-1].outcome == Outcome.COMPLETED:
            break
    return chain


class ChainRuns:
    """Whole runs and first segments, each made once per test run and shared by the tests that
    start from it (the chain, and a test that breaks its second segment), whichever pytest-xdist
    worker runs them: the first to need one makes it under a file lock in the run's temporary
    folder, the others wait for it and read it."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        base = factory.getbasetemp()
        # Under pytest-xdist each worker's folder sits in one folder of the run's own.
        self.shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "chains"
        self.shared.mkdir(exist_ok=True)
        self._whole: dict[str, Chain] = {}
        self._first: dict[str, Chain] = {}

    def whole(self, name: str, spec: SegmentSpec, timeout: float = 120) -> SegmentResult:
        """The uninterrupted run's result."""
        return self.whole_run(name, spec, timeout).results[0]

    def whole_run(self, name: str, spec: SegmentSpec, timeout: float = 120) -> Chain:
        """The uninterrupted run as a chain of one segment: its result and its checkpoint."""
        if name not in self._whole:

            def make(root: Path) -> Chain:
                return Chain([spec], [root], [run_whole(spec, root, timeout)])

            def read(root: Path) -> Chain:
                return Chain([spec], [root], [read_result(root, spec)])

            self._whole[name] = self._once(f"{name}-whole", make, read)
        return self._whole[name]

    def first_segment(
        self, name: str, spec: SegmentSpec, stop: Stop, timeout: float = 120
    ) -> Chain:
        """Segment 0 of `spec`, ended by `stop`: the start of every chain of that name."""
        if name not in self._first:
            whole = self.whole(name, spec, timeout)

            def read(workdir: Path) -> Chain:
                root = segment_root(workdir, 0)
                return Chain([spec], [root], [read_result(root, spec)])

            self._first[name] = self._once(
                f"{name}-chain",
                lambda workdir: run_chain(spec, [stop], workdir, whole, timeout=timeout),
                read,
            )
        return self._first[name]

    def _once(self, name: str, make: Callable[[Path], T], read: Callable[[Path], T]) -> T:
        folder = self.shared / name
        made = folder / ".made"
        with FileLock(self.shared / f"{name}.lock"):
            if made.exists():
                return read(folder)
            shutil.rmtree(folder, ignore_errors=True)  # what a killed worker left half made
            result = make(folder)
            made.touch()
            return result
