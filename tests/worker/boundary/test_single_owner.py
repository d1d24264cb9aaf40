"""What a session and the orchestrator agree on is spelled in worker/boundary/ and nowhere else.

Reads the source of orchestrator/, trainers/ and the rest of worker/ and fails on any module that
spells a session path, formats or parses a launch id, or restates the padding or margin defaults
on its own, instead of importing them from worker.boundary.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.segments import REPO_ROOT
from worker.boundary import paths

SCANNED = ("orchestrator", "worker", "trainers")
OWNER = REPO_ROOT / "worker" / "boundary"
# Names distinctive enough that any string equal to one is a session path.
FILE_NAMES = {
    paths.SEGMENT_FILE,
    paths.RESULT_FILE,
    paths.HEARTBEAT_FILE,
    paths.MANIFEST_FILE,
    paths.SESSION_FILE,
    paths.STATUS_FILE,
    paths.PID_FILE,
    paths.LAUNCH_LOCK_FILE,
    paths.LOG_FILE,
}
# Common words: a session path only where they are joined onto a path or named as a constant.
DIR_NAMES = {paths.INPUT_DIR, paths.WORKING_DIR, paths.CHECKPOINT_DIR}
PREFIXES = (f"{paths.INPUT_DIR}/", f"{paths.WORKING_DIR}/")
MARGIN_FIELDS = {"k_steps", "safety_seconds"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _number(node: ast.AST | None) -> bool:
    """A literal number, or a call (pydantic's Field) given one as its default."""
    if isinstance(node, ast.Call):
        node = next((k.value for k in node.keywords if k.arg == "default"), None)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def violations(source: str) -> list[str]:
    """What `source` spells that only worker.boundary may: one line per finding."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        text = _text(node)
        spelled = text is not None and id(node) not in docstrings
        if spelled and (text in FILE_NAMES or str(text).startswith(PREFIXES)):
            found.append(f"{line}: session path {text!r}")
        joined = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        if joined and _text(node.right) in DIR_NAMES:
            found.append(f"{line}: session path / {_text(node.right)!r}")
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if node.value is not None and _text(node.value) in DIR_NAMES:
                found.append(f"{line}: session directory named {_text(node.value)!r}")
            if any(name.endswith("PADDING") for name in names):
                found.append(f"{line}: a padding of its own ({', '.join(names)})")
            if MARGIN_FIELDS & set(names) and _number(node.value):
                found.append(f"{line}: a margin default of its own ({', '.join(names)})")
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = "".join(_text(part) or "" for part in ast.walk(node.format_spec))
            if spec == "04d":
                found.append(f"{line}: a launch id formatted by hand")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"rsplit", "rpartition"}
            and node.args
            and _text(node.args[0]) == "-"
        ):
            found.append(f"{line}: a launch id parsed by hand ({node.func.attr})")
    return found


def _modules() -> list[Path]:
    files = [path for top in SCANNED for path in sorted((REPO_ROOT / top).rglob("*.py"))]
    return [path for path in files if OWNER not in path.parents]


def test_only_the_boundary_package_spells_what_both_sides_agree_on() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{finding}"
        for path in _modules()
        for finding in violations(path.read_text())
    ]
    assert found == []


def test_the_scan_finds_each_kind_of_restated_convention() -> None:
    # The scan above passes only if it could fail: each convention, restated, is found.
    source = '''
"""Docstrings may name segment.json and working/ freely."""
SEGMENT = "segment.json"
RESUME = "input/checkpoint"
WORKING = "working"
PADDING = 1.25
k_steps: float = 1.25
out = root / "working"
ident = f"{job}-{index:04d}"
job = ident.rsplit("-", 1)[0]
safety_seconds: float = Field(default=1.0, ge=0)
k_steps: float = Field(default=DEFAULT_K_STEPS, ge=0, le=100)
'''
    assert sorted(finding.split(" (")[0] for finding in violations(source)) == [
        "10: a launch id parsed by hand",
        "11: a margin default of its own",
        "3: session path 'segment.json'",
        "4: session path 'input/checkpoint'",
        "5: session directory named 'working'",
        "6: a padding of its own",
        "7: a margin default of its own",
        "8: session path / 'working'",
        "9: a launch id formatted by hand",
    ]


def test_the_scan_covers_the_modules_that_used_to_restate_them() -> None:
    scanned = {path.relative_to(REPO_ROOT).as_posix() for path in _modules()}
    assert {
        "orchestrator/planner.py",
        "orchestrator/backends/local/backend.py",
        "orchestrator/backends/local/supervisor.py",
        "orchestrator/backends/kaggle/backend.py",
        "worker/kaggle_session.py",
        "worker/kaggle_access/chaining.py",
    } <= scanned
    assert not any(name.startswith("worker/boundary/") for name in scanned)
