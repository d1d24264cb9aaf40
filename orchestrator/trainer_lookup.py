"""Checks a job's "package.module:Class" trainer by reading source files, never by importing.

The API server must not run user code: importing a module (or even finding a dotted name with
importlib.util.find_spec, which imports its parent packages) runs it. The real import happens
only in the worker. Here a module is located with PathFinder one package level at a time, its
file is parsed with `ast` in a child process, and the class must subclass worker.Trainer by
static inspection.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

TRAINER_BASES = frozenset({"worker.Trainer", "worker.trainer.Trainer"})
# Baton's own code is never a trainer: `worker.__main__` would run the worker in the server.
BATON_PACKAGES = frozenset({"worker", "orchestrator", "migrations"})
# Base classes may come from the worker (worker.LoopTrainer, worker.hf.HFLoopTrainer): its
# source is read to follow them, though it is never a trainer itself.
READABLE_BASE_PACKAGES = frozenset({"worker"})
MAX_SOURCE_BYTES = 2 * 1024 * 1024
# How far a chain of base classes is followed across modules.
MAX_BASE_DEPTH = 8

OUTLINE_TIMEOUT_SECONDS = 20.0

log = logging.getLogger(__name__)


class TrainerRejected(ValueError):
    """The trainer string names nothing that may run as a trainer; the message says why."""


@dataclass(frozen=True)
class ModuleOutline:
    """What a module defines at top level, as far as reading its source tells."""

    # class name -> its base class expressions, qualified through the module's imports
    classes: dict[str, tuple[str, ...]]
    # name bound by a top-level import -> what it names, fully qualified
    imported: dict[str, str]


@dataclass(frozen=True)
class _CacheKey:
    path: str
    mtime_ns: int
    size: int


_outlines: dict[_CacheKey, ModuleOutline] = {}


def outline(path: Path, module: str, is_package: bool) -> ModuleOutline:
    """Read `path`'s outline once per (path, mtime, size), in a child process.

    Not in this process: ast.parse of CPython 3.11 before 3.11.8 corrupts its state when another
    thread parses at the same moment (python/cpython gh-106905), and Python 3.11's traceback
    formatting parses too; a hostile file's deep nesting can also exhaust the parser's stack.
    """
    stat = path.stat()
    key = _CacheKey(str(path), stat.st_mtime_ns, stat.st_size)
    cached = _outlines.get(key)
    if cached is not None:
        return cached
    if stat.st_size > MAX_SOURCE_BYTES:
        raise TrainerRejected(f"trainer module {module!r} is larger than {MAX_SOURCE_BYTES} bytes")
    command = [sys.executable, "-I", "-m", "orchestrator.trainer_outline", str(path), module]
    if is_package:
        command.append("--package")
    try:
        done = subprocess.run(
            command, capture_output=True, timeout=OUTLINE_TIMEOUT_SECONDS, check=False
        )
        answer = json.loads(done.stdout or b"{}")
    except (subprocess.TimeoutExpired, ValueError, OSError) as exc:
        log.warning("could not outline %s: %s", path, exc)
        raise TrainerRejected(f"trainer module {module!r} could not be read") from exc
    if "classes" not in answer:
        raise TrainerRejected(f"trainer module {module!r} is not valid Python")
    result = ModuleOutline(
        {name: tuple(bases) for name, bases in answer["classes"].items()}, answer["imported"]
    )
    _outlines[key] = result
    return result


@dataclass(frozen=True)
class _Located:
    path: Path
    is_package: bool


class TrainerFinder:
    """Resolves trainer strings within the packages an operator allows."""

    def __init__(self, packages: Iterable[str], search_path: Sequence[str]) -> None:
        self.packages = frozenset(packages)
        self.search_path = list(search_path)

    def check(self, entry: str) -> None:
        """Raise TrainerRejected unless `entry` names a worker.Trainer subclass we may run."""
        module, sep, name = entry.partition(":")
        if not sep or not module or not name:
            raise TrainerRejected(
                f"trainer must look like 'package.module:ClassName', not {entry!r}"
            )
        self._allowed(module)
        if not self._subclasses_trainer(module, name, depth=0):
            raise TrainerRejected(
                f"{name!r} in {module!r} is not a class that subclasses worker.Trainer"
            )

    def _allowed(self, module: str) -> None:
        parts = module.split(".")
        if any(not part.isidentifier() for part in parts):
            raise TrainerRejected(f"{module!r} is not a dotted module name")
        if any(part.startswith("__") and part.endswith("__") for part in parts):
            raise TrainerRejected(f"trainer module {module!r} names a special (dunder) module")
        top = parts[0]
        if top in sys.stdlib_module_names or top in BATON_PACKAGES:
            raise TrainerRejected(f"{top!r} is not a trainer package")
        if top not in self.packages:
            allowed = ", ".join(sorted(self.packages)) or "none"
            raise TrainerRejected(
                f"trainer package {top!r} is not allowed here (allowed: {allowed}; "
                "an operator adds packages with BATON_TRAINER_PACKAGES or BATON_TRAINER_PATHS)"
            )

    def _locate(self, module: str) -> _Located | None:
        """Find `module`'s source file level by level; PathFinder executes nothing."""
        search: Sequence[str] | None = self.search_path
        found = None
        for depth, _ in enumerate(parts := module.split(".")):
            if search is None:
                return None
            name = ".".join(parts[: depth + 1])
            found = PathFinder.find_spec(name, list(search))
            if found is None and depth == 0:
                # An editable install is found by a meta-path finder, not through sys.path.
                # For a top-level name find_spec imports nothing: there is no parent package.
                found = importlib.util.find_spec(name)
            if found is None:
                return None
            search = found.submodule_search_locations
        if found is None or found.origin is None or not found.origin.endswith(".py"):
            return None
        return _Located(Path(found.origin), found.submodule_search_locations is not None)

    def _subclasses_trainer(self, module: str, name: str, depth: int) -> bool:
        if depth > MAX_BASE_DEPTH:
            return False
        if depth > 0 and module.split(".")[0] not in self.packages | READABLE_BASE_PACKAGES:
            return False
        located = self._locate(module)
        if located is None:
            if depth == 0:
                raise TrainerRejected(f"trainer module {module!r} was not found")
            return False
        found = outline(located.path, module, located.is_package)
        bases = found.classes.get(name)
        if bases is None and name in found.imported:
            # A re-export (`from .model import MyTrainer` in a package's __init__).
            bases = (found.imported[name],)
            if bases[0] in TRAINER_BASES:
                return False  # worker.Trainer itself is abstract, not a trainer
        if bases is None:
            if depth == 0:
                raise TrainerRejected(f"trainer module {module!r} defines no class {name!r}")
            return False
        for base in bases:
            if base in TRAINER_BASES:
                return True
            base_module, _, base_name = base.rpartition(".")
            if base_module and self._subclasses_trainer(base_module, base_name, depth + 1):
                return True
        return False
