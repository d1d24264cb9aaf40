"""An in-memory-fast fake backend for engine tests: no subprocess, no torch, shared by processes.

Its state lives in a directory, so several threads and processes can drive one fake "cloud" at
once, as several orchestrators share one real backend. A session "trains" deterministically: the
model is a hash chain over the steps, so a chained job ends on the same digest as an uninterrupted
one only if every segment resumed exactly where the last committed. Checkpoints are real
manifest-verified directories (worker.boundary.manifest), so the engine's verification is exercised.

Knobs:
    steps_per_session   steps one session trains before its "deadline"
    session_seconds     how long a session reports RUNNING after its launch (on `clock`)
    visible_after       a launch becomes visible to `find` only this long after it was made
    faults              method name -> list of exceptions to raise, one per call, in order
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.backends.base import (
    Collected,
    LaunchRequest,
    Quota,
    SessionStatus,
    Slot,
)
from worker.boundary.contract import CheckpointRef, SegmentResult, Timings
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.manifest import (
    CorruptCheckpoint,
    sha256_file,
    verify_checkpoint,
    write_manifest,
)
from worker.boundary.paths import MANIFEST_FILE
from worker.boundary.transport import RemoteCopy, read_remote, write_stub

STATE_FILE = "state.json"


def chain_value(value: str, step: int) -> str:
    return hashlib.sha256(f"{value}:{step}".encode()).hexdigest()


def uninterrupted_digest(total_steps: int, seed: int = 7) -> str:
    value = f"seed-{seed}"
    for step in range(total_steps):
        value = chain_value(value, step)
    return hashlib.sha256(value.encode()).hexdigest()


class FakeBackend:
    name = "local"
    overrun_slack_seconds: float | None = None

    def __init__(
        self,
        root: Path,
        *,
        steps_per_session: int = 10,
        session_seconds: float = 0.0,
        visible_after: float = 0.0,
        slot_limit: int = 1000,
        poll_seconds: float = 0.05,
        clock: Callable[[], float] = time.time,
        faults: dict[str, list[BaseException]] | None = None,
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "sessions").mkdir(exist_ok=True)
        self.steps_per_session = steps_per_session
        self.session_seconds = session_seconds
        self.visible_after = visible_after
        self.slot = Slot("fake", slot_limit)
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.faults = faults or {}
        self.calls: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    # --- bookkeeping shared across processes ---------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._lock, open(self.root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _log(self, name: str, record: dict[str, Any]) -> None:
        with open(self.root / name, "a") as f:
            f.write(json.dumps(record) + "\n")

    def records(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def launches(self) -> list[str]:
        return [record["launch_id"] for record in self.records("launches.log")]

    def cancels(self) -> list[dict[str, Any]]:
        return self.records("cancels.log")

    def _enter(self, method: str) -> None:
        self.calls.append((method, self.clock()))
        queue = self.faults.get(method)
        if queue:
            raise queue.pop(0)

    def _session(self, handle: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "sessions" / f"{handle}.json").read_text())
        return data

    # --- the Backend protocol ------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> str:
        self._enter("launch")
        spec = request.spec
        start = spec.expect.step if spec.expect else 0
        if request.resume_from is not None and spec.expect is not None:
            try:
                verify_checkpoint(request.resume_from, spec.expect)
                value = json.loads((request.resume_from / STATE_FILE).read_text())["value"]
                rejected = None
            except (CorruptCheckpoint, OSError) as exc:
                value, rejected = "", str(exc)
        else:
            value, rejected = f"seed-{spec.seed}", None
        end = min(spec.total_steps, start + self.steps_per_session)
        for step in range(start, end):
            value = chain_value(value, step)
        session = {
            "launch_id": request.launch_id,
            "job_id": spec.job_id,
            "segment_index": spec.segment_index,
            "start": start,
            "end": end,
            "total": spec.total_steps,
            "value": value,
            "rejected": rejected,
            "launched_at": self.clock(),
            "limit_seconds": spec.limit_seconds,
        }
        with self._exclusive():
            # Every push is logged, a second one of the same id too: that is what tests count.
            self._log(
                "launches.log",
                {"launch_id": request.launch_id, "by": _who(), "at": self.clock()},
            )
            path = self.root / "sessions" / f"{request.launch_id}.json"
            if not path.exists():
                path.write_text(json.dumps(session))
        return request.launch_id

    def find(self, launch_id: str) -> str | None:
        self._enter("find")
        path = self.root / "sessions" / f"{launch_id}.json"
        if not path.exists():
            return None
        if self.clock() - self._session(launch_id)["launched_at"] < self.visible_after:
            return None
        return launch_id

    def status(self, handle: str) -> SessionStatus:
        self._enter("status")
        session = self._session(handle)
        if (self.root / "sessions" / f"{handle}.cancelled").exists():
            return SessionStatus.FINISHED
        if self.clock() - session["launched_at"] < self.session_seconds:
            return SessionStatus.RUNNING
        return SessionStatus.FINISHED

    def collect(self, handle: str, store: Path) -> Collected:
        self._enter("collect")
        session = self._session(handle)
        if (self.root / "sessions" / f"{handle}.cancelled").exists():
            return Collected(None, None, None, 0.0, "cancelled; its output was dropped")
        outcome = "completed" if session["end"] >= session["total"] else "deadline"
        if session["rejected"] is not None:
            outcome = "rejected"
        result = SegmentResult(
            job_id=session["job_id"],
            segment_index=session["segment_index"],
            outcome=outcome,
            start_step=session["start"],
            end_step=session["end"] if outcome != "rejected" else session["start"],
            limit_seconds=session["limit_seconds"],
            timings=Timings(),
            error=session["rejected"],
        )
        if outcome == "rejected":
            return Collected(result, None, None, 0.0, f"checkpoint rejected: {session['rejected']}")
        if not store.exists():
            tmp = store.with_name(store.name + ".tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / STATE_FILE).write_text(json.dumps({"value": session["value"]}))
            write_manifest(
                tmp,
                job_id=session["job_id"],
                segment_index=session["segment_index"],
                step=session["end"],
                model_digest=hashlib.sha256(session["value"].encode()).hexdigest(),
            )
            os.replace(tmp, store)
        manifest = verify_checkpoint(store)
        return Collected(result, manifest, store, 0.0, None)

    def cancel(self, handle: str) -> bool:
        self._enter("cancel")
        launched_by = next(
            (r["by"] for r in self.records("launches.log") if r["launch_id"] == handle), None
        )
        self._log("cancels.log", {"launch_id": handle, "by": _who(), "launched_by": launched_by})
        (self.root / "sessions" / f"{handle}.cancelled").touch()
        return True

    def request_stop(self, handle: str) -> None:
        self._enter("request_stop")

    def quota(self) -> Quota | None:
        self._enter("quota")
        return None

    def log_file(self, handle: str) -> Path | None:
        return None

    def progress(self, handle: str) -> Heartbeat | None:
        self._enter("progress")
        return None

    def queue_reason(self, handle: str) -> str | None:
        return None

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        return 0


def _who() -> str:
    return f"{os.getpid()}:{threading.get_ident()}"


class PublishingFakeBackend(FakeBackend):
    """A fake Kaggle whose sessions publish their checkpoints on the account (the `kernel`
    transport, worker/boundary/transport.py): the store keeps a stub, the files stay under
    `published(...)`, and `fetch_checkpoint` brings them here, every file verified against the
    manifest the stub kept, as the Kaggle backend's does. `fetches` counts its downloads."""

    name = "kaggle"
    fetches = 0

    def published(self, job_id: str, segment_index: int) -> Path:
        return self.root / "published" / job_id / f"{segment_index:05d}"

    def launch(self, request: LaunchRequest) -> str:
        expect, stored = request.spec.expect, request.resume_from
        if expect is not None and stored is not None and read_remote(stored) is not None:
            # The session mounts the copy on the account, not the stub.
            on_kaggle = self.published(expect.job_id, expect.segment_index)
            request = replace(request, resume_from=on_kaggle)
        return super().launch(request)

    def collect(self, handle: str, store: Path) -> Collected:
        session = self._session(handle)
        on_kaggle = self.published(session["job_id"], session["segment_index"])
        on_kaggle.parent.mkdir(parents=True, exist_ok=True)
        collected = super().collect(handle, on_kaggle)
        if collected.checkpoint is None:
            return collected
        manifest = on_kaggle / MANIFEST_FILE
        copy = RemoteCopy(f"alice/{on_kaggle.name}", 1, on_kaggle.name, sha256_file(manifest))
        write_stub(store, manifest, copy)
        return replace(collected, checkpoint=store)

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        self._enter("fetch_checkpoint")
        remote = read_remote(stored)
        if remote is None:
            return 0
        self.fetches += 1
        on_kaggle = self.published(expect.job_id, expect.segment_index)
        staging = stored.with_name(stored.name + ".fetch")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(on_kaggle, staging)
        try:
            verify_checkpoint(staging, expect)
            if sha256_file(staging / MANIFEST_FILE) != remote.manifest_sha256:
                raise CorruptCheckpoint("its manifest is not the one the stub kept")
        except CorruptCheckpoint:
            shutil.rmtree(staging)
            raise
        shutil.rmtree(stored)
        staging.replace(stored)
        return sum(path.stat().st_size for path in stored.iterdir())
