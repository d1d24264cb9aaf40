"""Each benchmark entry point runs as a user runs it: `python -m MODULE` from the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.marks import starts_processes

REPO_ROOT = Path(__file__).resolve().parents[2]
EntryPoint = Callable[..., str]


@pytest.fixture
@starts_processes
def entry_point() -> EntryPoint:
    """`run(module, *args)`: `python -m module args` from the repository root; the test fails
    with the end of its stderr unless it exits 0. Returns what it printed."""

    def run(module: str, *args: str | Path, timeout: float = 540) -> str:
        argv = [sys.executable, "-m", module, *map(str, args)]
        ran = subprocess.run(
            argv, cwd=REPO_ROOT, env=os.environ, capture_output=True, text=True, timeout=timeout
        )
        assert ran.returncode == 0, (
            f"{' '.join(argv)} exited {ran.returncode}:\n{ran.stderr[-3000:]}"
        )
        return ran.stdout

    return run
