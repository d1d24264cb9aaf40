"""`make test-cpu`: a test is charged the CPU of the processes it starts, not only its own, and
the summary names the costliest test first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.factories import require_services
from tests.support import cpu_meter

REPO = Path(__file__).resolve().parents[2]
CHILD_CPU_SECONDS = 0.6

SUITE = f"""
import subprocess, sys

# A child that works until it has used {CHILD_CPU_SECONDS} s of CPU, however fast the machine.
BURN = "import time\\nwhile time.process_time() < {CHILD_CPU_SECONDS}: pass"

def test_starts_a_busy_process():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_does_nothing():
    pass
"""


def cgroups_writable() -> bool:
    try:
        cpu_meter.Cgroups()
    except pytest.UsageError:
        return False
    return True


@pytest.fixture
def meterable() -> None:
    if not cgroups_writable() and not require_services():
        pytest.skip("no cgroup this process may create (root, cgroup v1 cpuacct or v2)")


def test_a_test_is_charged_the_cpu_of_the_process_it_started(meterable, tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    report = tmp_path / "out" / "cpu.jsonl"
    report.parent.mkdir()
    report.write_text("a line from an earlier run\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    meter = ["-p", "tests.support.cpu_meter", "--cpu-report", str(report)]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            *meter,
            "-p",
            "no:cacheprovider",
            "test_suite.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    costs = {cost.nodeid: cost for cost in cpu_meter.read(report)}  # the earlier line is gone
    assert set(costs) == {
        "test_suite.py::test_starts_a_busy_process",
        "test_suite.py::test_does_nothing",
    }
    busy = costs["test_suite.py::test_starts_a_busy_process"]
    idle = costs["test_suite.py::test_does_nothing"]
    assert busy.cpu >= CHILD_CPU_SECONDS  # the child's CPU, charged to the test that started it
    assert busy.own < CHILD_CPU_SECONDS <= busy.cpu  # not the test process's own
    assert idle.cpu < CHILD_CPU_SECONDS
    assert busy.wall >= busy.own

    printed = subprocess.run(
        [sys.executable, "-m", "tests.support.cpu_meter", str(report), "--top", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.startswith("2 tests: ")
    costliest = printed.split("costliest tests")[1].splitlines()[1]
    assert costliest.endswith("test_suite.py::test_starts_a_busy_process")
    assert "test_does_nothing" not in printed
