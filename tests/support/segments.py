"""Factories for segment specs and session roots, and a runner for `python -m worker`."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from worker.boundary.contract import CheckpointRef, SegmentResult, SegmentSpec
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE, RESUME_PATH, SessionPaths

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_spec(**overrides: Any) -> SegmentSpec:
    fields: dict[str, Any] = {
        "job_id": "job-1",
        "segment_index": 0,
        "trainer": "tests.support.trainers:LinearTrainer",
        "config": {},
        "total_steps": 30,
        "limit_seconds": 600.0,
        "seed": 7,
    }
    fields.update(overrides)
    return SegmentSpec(**fields)


def next_spec(previous: SegmentSpec, result: SegmentResult, **overrides: Any) -> SegmentSpec:
    """The spec of the segment that resumes from `previous`'s committed checkpoint."""
    fields: dict[str, Any] = {
        "segment_index": previous.segment_index + 1,
        "resume_path": RESUME_PATH,
        "expect": CheckpointRef(previous.job_id, previous.segment_index, result.end_step),
    }
    return dataclasses.replace(previous, **{**fields, **overrides})


def make_root(root: Path, spec: SegmentSpec, resume_from: Path | None = None) -> Path:
    """Lay out a session root: segment.json, plus the previous checkpoint under input/."""
    root.mkdir(parents=True, exist_ok=True)
    if resume_from is not None:
        shutil.copytree(resume_from, SessionPaths(root).resume_checkpoint)
    SessionPaths(root).segment.write_text(spec.to_json())
    return root


def output_checkpoint(root: Path, spec: SegmentSpec) -> Path:
    return root / spec.output_dir / CHECKPOINT_DIR


def read_result(root: Path, spec: SegmentSpec) -> SegmentResult:
    return SegmentResult.from_dict(json.loads((root / spec.output_dir / RESULT_FILE).read_text()))


def worker_command(root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "worker", "--root", str(root), *extra]


def start_worker(root: Path) -> subprocess.Popen[str]:
    """Start a real worker process; stderr is piped so tests can follow its step log."""
    return subprocess.Popen(
        worker_command(root),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_worker(root: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        worker_command(root),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


STEP_LOG = re.compile(r"\bstep (\d+)/\d+\b")


def terminate_after_step(root: Path, step: int, timeout: float = 120) -> int:
    """Run a worker and SIGTERM it once its log shows `step`; returns its exit code.

    Deterministic in what it asserts: the worker stops at whatever step the signal reaches it,
    and commits there, however fast or slow the machine is.
    """
    process = start_worker(root)
    assert process.stderr is not None
    for line in process.stderr:
        found = STEP_LOG.search(line)
        if found and int(found.group(1)) >= step:
            process.terminate()
            break
    process.communicate(timeout=timeout)
    return process.returncode
