"""An emulator per test, and Baton's Kaggle account on it through the real client: the fixtures
of the Kaggle backend's tests (tests/orchestrator/backends/kaggle/) and of the client's
(tests/worker/kaggle_access/), each conftest importing them; and a committed checkpoint to
publish, published the way the engine asks, tick after tick."""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.factories import emulator_clients, fast_emulator
from tests.kaggle_emulator import Emulator
from tests.support.marks import starts_processes
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Rejected, Transient
from worker.boundary.kernel_options import KernelOptions
from worker.boundary.manifest import write_manifest
from worker.kaggle_access.checkpoints import CheckpointDataset
from worker.kaggle_access.client import KaggleAccount

EXPECT = CheckpointRef("j1", 0, 10)


@pytest.fixture
@starts_processes
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with fast_emulator(tmp_path / "emulator") as running:
        yield running


def account_on(
    emulator: Emulator, username: str = "alice", key: str = "alice-key"
) -> KaggleAccount:
    return KaggleAccount(username, key, emulator_clients(emulator.url), timeout_seconds=10)


@pytest.fixture
def alice(emulator: Emulator) -> KaggleAccount:
    return account_on(emulator)


def committed_checkpoint(
    path: Path, expect: CheckpointRef = EXPECT, files: Mapping[str, bytes] | None = None
) -> Path:
    """A small checkpoint directory (`files`, else one `model.bin`) with a valid manifest for
    `expect`."""
    path.mkdir(parents=True)
    for name, content in (files or {"model.bin": b"weights" * 100}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(content)
    write_manifest(
        path,
        job_id=expect.job_id,
        segment_index=expect.segment_index,
        step=expect.step,
        model_digest="d" * 64,
    )
    return path


def publish_until_settled(
    dataset: CheckpointDataset,
    checkpoint: Path,
    timeout: float = 120,  # a hang guard: a slow, loaded machine must not fail a test
    expect: CheckpointRef = EXPECT,
    result: Path | None = None,
) -> object:
    """Ask as the engine does, tick after tick, until publishing returns (the published
    checkpoint) or is refused (the Rejected); None if neither happens within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return dataset.ensure_published(expect, checkpoint, result)
        except Transient:
            time.sleep(0.1)
        except Rejected as refused:
            return refused
    return None


def bytes_written_beside(folder: Path, checkpoint: Path) -> int:
    """Bytes the files under `folder` hold that `checkpoint`'s own files do not: a regular
    file's blocks unless it is a hard link of one of the checkpoint's, a symbolic link's target
    path (the link holds none of the file's bytes). What publishing a checkpoint costs the
    session's disk beyond the checkpoint itself (issue 18: it must write it once)."""
    files = [p for p in checkpoint.rglob("*") if p.is_file()]
    shared = {(p.stat().st_dev, p.stat().st_ino) for p in files}
    held = 0
    for entry in folder.rglob("*"):
        info = entry.lstat()
        if entry.is_symlink():
            held += len(os.readlink(entry))
        elif entry.is_file() and (info.st_dev, info.st_ino) not in shared:
            held += info.st_blocks * 512
    return held


def script_leaving(made: Path) -> str:
    """A kernel's script that writes every file under `made` into its output, as a session that
    trained would leave it (its files carried in the script: a kernel reaches nothing else)."""
    files = {
        path.relative_to(made).as_posix(): base64.b64encode(path.read_bytes()).decode()
        for path in made.rglob("*")
        if path.is_file()
    }
    return (
        "import base64, json, pathlib\n"
        f"for name, data in json.loads({json.dumps(json.dumps(files))}).items():\n"
        "    path = pathlib.Path(name)\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    path.write_bytes(base64.b64decode(data))\n"
    )


def embedded_options(script: str) -> KernelOptions:
    """What a pushed kernel's script tells its session besides the segment (the OPTIONS line
    worker/kaggle_access/kernel_script.py writes), read back as the session reads it."""
    told = re.search(r"^OPTIONS = json\.loads\((.+)\)$", script, re.MULTILINE)
    assert told is not None, script[:300]
    return KernelOptions.from_json(json.loads(ast.literal_eval(told.group(1))))
