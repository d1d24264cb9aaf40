"""Where the suite's CPU goes: every test's CPU seconds, with every process it started.

`pytest -p tests.support.cpu_meter --cpu-report FILE` (`make test-cpu`) runs each test, its setup
and teardown included, in a cgroup of its own: the kernel charges the test with the CPU of every
process it starts, reaped or not (a supervisor, a session and its ranks, a server, a browser),
until the test ends. The warm host that local sessions are forked from
(orchestrator/backends/local/warm.py) moves into each test's cgroup with it, so a session is
charged to the test that launched it. What runs outside the test's process tree is not charged
to it: a Slurm job under slurmd, PostgreSQL's and Redis's own processes, pytest's collection.
Each test appends one JSON line to FILE: its node id, wall seconds, CPU seconds, and the test
process's own share of them. Under pytest-xdist every worker appends to the same file.
`python -m tests.support.cpu_meter FILE` prints the totals and the costliest tests and files.

It needs to create cgroups: root, with cgroup v1's `cpuacct` hierarchy or cgroup v2 (what this
machine has; a container may have neither writable).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import time
from collections.abc import Generator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from orchestrator.backends.local import warm

OPTION = "--cpu-report"
V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOT = Path("/sys/fs/cgroup")
GROUP_FOLDER = "baton-tests"


@dataclass(frozen=True)
class Cost:
    nodeid: str
    wall: float  # seconds from the start of its setup to the end of its teardown
    cpu: float  # CPU seconds of the test process and every process it started
    own: float  # CPU seconds of the test process alone


class Cgroups:
    """One cgroup hierarchy that accounts CPU: v1's cpuacct, else v2's."""

    def __init__(self) -> None:
        if (V1_ROOT / "cpuacct.usage").exists():
            self.root, self.v2 = V1_ROOT, False
        elif (V2_ROOT / "cgroup.controllers").exists():
            self.root, self.v2 = V2_ROOT, True
        else:
            raise pytest.UsageError(f"{OPTION} needs cgroup v1's cpuacct or cgroup v2")
        self.home = self.root / self._own_path()
        self.groups = self.root / GROUP_FOLDER
        try:
            self.groups.mkdir(exist_ok=True)
        except OSError as error:
            raise pytest.UsageError(f"{OPTION} cannot create cgroups here: {error}") from error

    def _own_path(self) -> str:
        """The cgroup this process is in, relative to the hierarchy's root."""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.v2 and controllers == "") or "cpuacct" in controllers.split(","):
                return path.lstrip("/")
        raise pytest.UsageError(f"{OPTION}: this process is in no CPU-accounting cgroup")

    def join(self, name: str) -> Path:
        group = self.groups / name
        group.mkdir()
        _move_launchers(group)
        return group

    def leave(self, group: Path) -> float:
        """Move back home; the group's CPU seconds. The group stays while processes the test
        left behind are still in it."""
        _move_launchers(self.home)
        seconds = self._usage(group)
        with contextlib.suppress(OSError):
            group.rmdir()
        return seconds

    def _usage(self, group: Path) -> float:
        if not self.v2:
            return int((group / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6


def _move_launchers(group: Path) -> None:
    """This process into `group`, and its warm host: the sessions the host forks while a test
    runs are born in the test's group, as those this process starts itself are."""
    (group / "cgroup.procs").write_text(str(os.getpid()))
    host = warm.shared_host().pid
    if host is not None:
        with contextlib.suppress(ProcessLookupError, OSError):
            (group / "cgroup.procs").write_text(str(host))


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class CpuMeter:
    def __init__(self, report: Path) -> None:
        self.report = report
        self.cgroups = Cgroups()
        self.count = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self.count += 1
        group = self.cgroups.join(f"{os.getpid()}-{self.count}")
        started, own = time.monotonic(), _cpu_seconds()
        try:
            return (yield)
        finally:
            wall, own = time.monotonic() - started, _cpu_seconds() - own
            cpu = self.cgroups.leave(group)
            line = json.dumps(asdict(Cost(item.nodeid, wall, cpu, own)))
            with self.report.open("a") as file:
                file.write(line + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        metavar="FILE",
        type=Path,
        help="write every test's CPU seconds to FILE, each test in a cgroup of its own "
        "(tests/support/cpu_meter.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    report: Path | None = config.getoption(OPTION)
    if report is None:
        return
    if not hasattr(config, "workerinput"):  # the controlling process starts the file afresh
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text("")
    config.pluginmanager.register(CpuMeter(report.resolve()), "cpu_meter")


def read(report: Path) -> list[Cost]:
    return [Cost(**json.loads(line)) for line in report.read_text().splitlines() if line]


def summary(tests: list[Cost], top: int = 30) -> str:
    total = sum(test.cpu for test in tests)
    lines = [
        f"{len(tests)} tests: {total:,.0f} CPU-s charged to them "
        f"({sum(test.own for test in tests):,.0f} in the test processes themselves), "
        f"{sum(test.wall for test in tests):,.0f} s of wall time summed",
        "",
        f"The {top} costliest tests (CPU-s, of them the test process's, wall s):",
    ]
    for test in sorted(tests, key=lambda test: -test.cpu)[:top]:
        lines.append(f"{test.cpu:7.1f} {test.own:6.1f} {test.wall:7.1f}  {test.nodeid}")
    by_file: collections.Counter[str] = collections.Counter()
    for test in tests:
        by_file[test.nodeid.split("::")[0]] += test.cpu
    lines += ["", f"The {top} costliest files (CPU-s, share):"]
    for name, seconds in by_file.most_common(top):
        lines.append(f"{seconds:7.1f} {seconds / total if total else 0:6.1%}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The costliest tests of a --cpu-report file.")
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    print(summary(read(args.report), args.top))


if __name__ == "__main__":
    main()
