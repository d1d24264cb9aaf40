"""Builds the source of a segment's kernel: Baton's code embedded in one self-contained script.

Packaging choice: the worker package (which holds the Kaggle client code a self-chaining kernel
needs) and the trainer's top-level package are embedded in the script as a base64 tar.gz (a few
hundred KB at most), unpacked to a temp dir at start-up. No code dataset to keep in sync: a
kernel version's source is exactly the code it ran. Credentials are never embedded: a
self-chaining kernel reads its key from a Kaggle Secret the user attached.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
from collections.abc import Sequence
from importlib.machinery import PathFinder
from pathlib import Path

MAX_CODE_BYTES = 900 * 1024
_SKIP = ("__pycache__", ".pyc", ".pyo")


def _package_root(module: str, search_path: Sequence[Path] = ()) -> Path:
    """The directory of `module`'s top-level package (or the module file itself): from the
    operator's trainer paths first, as submit found it, then from this process's import path."""
    top = module.split(".")[0]
    found = PathFinder.find_spec(top, [str(path) for path in search_path]) if search_path else None
    if found is None:
        found = importlib.util.find_spec(top)
    if found is None or found.origin is None:
        raise LookupError(f"cannot find {top!r} to package it")
    origin = Path(found.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _add_tree(archive: tarfile.TarFile, path: Path, name: str) -> None:
    if path.is_file():
        archive.add(path, arcname=name)
        return
    for file in sorted(path.rglob("*")):
        if file.is_file() and not any(part in str(file) for part in _SKIP):
            archive.add(file, arcname=f"{name}/{file.relative_to(path).as_posix()}")


def code_archive(trainer: str, trainer_paths: Sequence[Path] = ()) -> bytes:
    """tar.gz of the worker package (with the Kaggle client code a self-chaining kernel needs,
    worker/kaggle_access) and the trainer's package (looked for in `trainer_paths` first)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        _add_tree(archive, _package_root("worker"), "worker")
        trainer_root = _package_root(trainer.partition(":")[0], trainer_paths)
        if trainer_root.name != "worker":
            _add_tree(archive, trainer_root, trainer_root.name)
    data = buffer.getvalue()
    if len(data) > MAX_CODE_BYTES:
        raise ValueError(
            f"the code to embed is {len(data)} bytes (limit {MAX_CODE_BYTES}); "
            "keep data files out of the trainer's package"
        )
    return data
