"""Apply one mutant to a scratch copy of the tree and run its tests there.

The copy holds the repository's tracked and untracked-but-not-ignored files; its own directory
comes first on sys.path (and PYTHONPATH, for the sessions it starts), so the mutated modules are
the ones imported. A mutant is killed when its tests fail, or hang past the time limit.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.mutation.mutants import Mutant

REPO_ROOT = Path(__file__).resolve().parents[2]
# Mutants break logic, not SQL dialects: PostgreSQL variants of a test are left to `make test`.
FAILED_TEST = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-m", "not integration"]


class Verdict(enum.StrEnum):
    KILLED = "killed"
    TIMEOUT = "timeout"  # counted as killed: the tests did not pass
    SURVIVED = "survived"
    STALE = "stale"  # the mutant's line is no longer in the code: the list needs updating


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: Verdict
    seconds: float
    detail: str = ""

    @property
    def killed_by(self) -> str:
        """The first failing test in pytest's summary (what caught the mutant)."""
        found = FAILED_TEST.search(self.detail)
        return found.group(1).split(" - ")[0] if found else ""


SKIPPED_DIRS = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__"}


def tracked_files(root: Path) -> list[str]:
    """The repository's files as git sees them; every file but caches outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return [
            path.relative_to(root).as_posix()
            for path in root.rglob("*")
            if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(root).parts)
        ]
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


@contextmanager
def scratch_copy(root: Path = REPO_ROOT) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="baton-mutation-") as scratch:
        copy = Path(scratch) / "tree"
        for name in tracked_files(root):
            target = copy / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target)
        yield copy


def locate(copy: Path, mutant: Mutant) -> tuple[Path, str] | None:
    """The one file matching the mutant's path patterns (comma-separated globs; a directory means
    its .py files) that holds the mutant's line, exactly once."""
    files = set()
    for pattern in mutant.path.split(","):
        for match in copy.glob(pattern.strip()):
            files |= set(match.rglob("*.py")) if match.is_dir() else {match}
    hits = [
        (path, text)
        for path in sorted(files)
        if (text := path.read_text()).count(mutant.before) == 1
    ]
    return hits[0] if len(hits) == 1 else None


def run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[int | None, str]:
    """pytest in the copy; (returncode, tail of its output), or (None, ...) past the timeout."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests],
        cwd=copy,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output[-2000:]
    return process.returncode, output[-2000:]


def check(copy: Path, mutant: Mutant) -> Outcome:
    started = time.monotonic()
    found = locate(copy, mutant)
    if found is None:
        return Outcome(mutant, Verdict.STALE, 0.0, f"{mutant.before!r} not found once")
    path, original = found
    path.write_text(original.replace(mutant.before, mutant.after))
    try:
        code, output = run_tests(copy, list(mutant.tests), mutant.timeout)
    finally:
        path.write_text(original)
    seconds = time.monotonic() - started
    if code is None:
        return Outcome(mutant, Verdict.TIMEOUT, seconds, output)
    if code == 0:
        return Outcome(mutant, Verdict.SURVIVED, seconds, output)
    if code != 1:  # 2-5: interrupted, internal error, usage error, nothing collected
        return Outcome(mutant, Verdict.STALE, seconds, f"pytest exit {code}: {output}")
    return Outcome(mutant, Verdict.KILLED, seconds, output)


def baseline(copy: Path, tests: list[str], timeout: float) -> tuple[bool, str]:
    """The unmutated copy must pass the same tests, or a 'kill' would mean nothing."""
    code, output = run_tests(copy, tests, timeout)
    return code == 0, output
