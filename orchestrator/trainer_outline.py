"""What a Python source file defines at top level, read with `ast`: run as a child process.

`python -I -m orchestrator.trainer_outline FILE MODULE [--package]` prints JSON: each class
with its base classes qualified through the module's imports, and what each import binds.
orchestrator/trainer_lookup.py runs it; the file is parsed, never executed.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any


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


def outline_source(source: bytes, module: str, is_package: bool) -> dict[str, Any]:
    tree = ast.parse(source)
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    aliases = _import_aliases(tree, module, is_package)
    classes: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = (_dotted(base) for base in node.bases)
            classes[node.name] = [
                _qualify(base, aliases, module, defined) for base in bases if base
            ]
    return {"classes": classes, "imported": aliases}


def main(argv: list[str]) -> int:
    path, module = Path(argv[1]), argv[2]
    try:
        answer = outline_source(path.read_bytes(), module, "--package" in argv[3:])
    except (SyntaxError, ValueError, RecursionError, MemoryError, OSError) as exc:
        answer = {"error": type(exc).__name__}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
