"""Installs a job's requirements in a session: offline from its wheel set, or building it once.

A wheel set is a folder of wheels plus `WHEELSET_FILE`, which says which requirements it holds
and for which interpreter and platform. The first session that needs one resolves the
requirements against the packages its image already has (`pip install --dry-run --report`),
builds only the missing ones as wheels (`pip wheel --no-deps`: the image's torch is never
downloaded again), and installs from that folder; the caller publishes it. Later sessions find it
mounted and install with `pip install --no-index --find-links`, downloading nothing. A wheel set
that is missing, built for another Python or platform, or that pip cannot install from (partial)
falls back to what every session did before: `pip install` from the index, with a log line
saying why. Standard library only: this runs before anything else in the kernel.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WHEELSET_FILE = "wheelset.json"
# How the requirements reached the session (result.json's `requirements`).
OFFLINE = "offline"  # from the mounted wheel set, nothing downloaded
BUILT = "built"  # downloaded once, built into a wheel set this session publishes
INDEX = "index"  # `pip install` from the index, as every session did before

log = logging.getLogger("worker.wheelhouse")


def interpreter_tag() -> str:
    """What a wheel set's binary wheels are good for: the interpreter and the platform."""
    return f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"


def requirements_key(requirements: Sequence[str]) -> list[str]:
    """The requirements as a wheel set is keyed by: whitespace normalised, sorted."""
    return sorted(" ".join(r.split()) for r in requirements)


@dataclass(frozen=True)
class Installed:
    """How the requirements were installed, how long it took, and the wheel set built (to be
    published) if one was."""

    how: str
    seconds: float
    built: Path | None = None


# Index settings an offline install must not consult (pip adds the environment's find-links to
# the command line's instead of replacing them).
_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")


def _pip(*args: str, offline: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not (offline and k in _INDEX_ENV)}
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False, env=env
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def install_offline(folder: Path, requirements: Sequence[str]) -> str | None:
    """Install from a mounted wheel set; None once installed, or why it could not be used."""
    try:
        described = json.loads((folder / WHEELSET_FILE).read_text())
    except (OSError, ValueError) as exc:
        return f"its {WHEELSET_FILE} is unreadable ({exc})"
    if not isinstance(described, dict):
        return f"its {WHEELSET_FILE} is not an object"
    if described.get("requirements") != requirements_key(requirements):
        return "it holds other requirements"
    if described.get("interpreter") != interpreter_tag():
        return f"it was built for {described.get('interpreter')}, this is {interpreter_tag()}"
    done = _pip(
        "install", "-q", "--no-index", "--find-links", str(folder), *requirements, offline=True
    )
    if done.returncode != 0:
        return f"pip cannot install from it (partial?): {_last_line(done)}"
    return None


def build_wheelset(requirements: Sequence[str], target: Path) -> str | None:
    """Download and build what the image lacks into `target`, and install from it; None once
    done, or why not (the caller then installs from the index)."""
    target.mkdir(parents=True, exist_ok=True)
    report = target.parent / "pip-report.json"
    done = _pip("install", "-q", "--dry-run", "--report", str(report), *requirements)
    if done.returncode != 0:
        return f"pip cannot resolve the requirements: {_last_line(done)}"
    try:
        wanted = [
            f"{item['metadata']['name']}=={item['metadata']['version']}"
            for item in json.loads(report.read_text())["install"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"pip's report is unusable ({exc!r})"
    if wanted:
        done = _pip("wheel", "-q", "--no-deps", "-w", str(target), *wanted)
        if done.returncode != 0:
            return f"pip cannot build wheels: {_last_line(done)}"
    described = {"requirements": requirements_key(requirements), "interpreter": interpreter_tag()}
    (target / WHEELSET_FILE).write_text(json.dumps(described, sort_keys=True))
    return install_offline(target, requirements)


def install_requirements(
    requirements: Sequence[str], mounted: Sequence[Path], build: bool
) -> Installed | None:
    """Install `requirements`: offline from the first usable wheel set in `mounted`, else by
    building one (where `build`), else from the index. None when there are none."""
    if not requirements:
        return None
    started = time.monotonic()
    for folder in mounted:
        if not (folder / WHEELSET_FILE).is_file():
            continue
        problem = install_offline(folder, requirements)
        if problem is None:
            log.info("requirements installed offline from the wheel set at %s", folder)
            return Installed(OFFLINE, time.monotonic() - started)
        log.warning(
            "the wheel set at %s is not usable: %s; installing from the index", folder, problem
        )
        break
    if build:
        target = Path(tempfile.mkdtemp(prefix="baton-wheels-")) / "wheels"
        problem = build_wheelset(requirements, target)
        if problem is None:
            log.info("requirements built into a wheel set, to be published for later sessions")
            return Installed(BUILT, time.monotonic() - started, target)
        log.warning("no wheel set built: %s; installing from the index", problem)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requirements], check=True)
    return Installed(INDEX, time.monotonic() - started)
