"""Checks a job's "package.module:Class" trainer by reading source files, never by importing.

The API server must not run user code: importing a module (or even finding a dotted name with
importlib.util.find_spec, which imports its parent packages) runs it. The real import happens
only in the worker. Here a module is located with PathFinder one package level at a time, its
file is parsed with `ast`, and the class must subclass worker.Trainer by static inspection.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import threading
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

# CPython 3.11 before 3.11.8 corrupts its AST state when two threads parse at once
# (python/cpython gh-106905): every parse in this process goes through this lock.
_PARSE_LOCK = threading.Lock()


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


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _import_aliases(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Local name -> fully qualified name, for the module's top-level imports."""
    aliases: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join([*base, source] if source else base)
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
    return aliases


def _qualify(expr: str, aliases: dict[str, str], module: str, local: set[str]) -> str:
    head, _, rest = expr.partition(".")
    if head in local:
        return f"{module}.{expr}"
    if head in aliases:
        return f"{aliases[head]}.{rest}" if rest else aliases[head]
    return expr


def outline(path: Path, module: str, is_package: bool) -> ModuleOutline:
    """Parse `path` once per (path, mtime, size); the parse itself is serialized."""
    stat = path.stat()
    key = _CacheKey(str(path), stat.st_mtime_ns, stat.st_size)
    cached = _outlines.get(key)
    if cached is not None:
        return cached
    if stat.st_size > MAX_SOURCE_BYTES:
        raise TrainerRejected(f"trainer module {module!r} is larger than {MAX_SOURCE_BYTES} bytes")
    source = path.read_bytes()
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source, filename=path.name)
    except (SyntaxError, ValueError) as exc:
        raise TrainerRejected(f"trainer module {module!r} is not valid Python") from exc
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    aliases = _import_aliases(tree, module, is_package)
    classes: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = (_dotted(base) for base in node.bases)
            classes[node.name] = tuple(
                _qualify(base, aliases, module, defined) for base in bases if base
            )
    result = ModuleOutline(classes, aliases)
    with _PARSE_LOCK:
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
