"""docs/testing.md stays true: every test it names exists, every mutant's guarantee is a row of its
table, every test a mutant names exists, and every mutant's line is still in the code."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.mutation.mutants import MUTANTS
from tests.mutation.runner import locate

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "testing.md"
NODE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


@cache
def _test_functions(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(node.name for node in tree.body if isinstance(node, ast.FunctionDef))


def _exists(node: str) -> bool:
    path, _, name = node.partition("::")
    if not (ROOT / path).is_file():
        return False
    return not name or name in _test_functions(path)


def _table_rows() -> dict[str, str]:
    section = DOC.read_text().split("## The guarantee table", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    return {row.split("|")[1].strip(): row for row in rows}


def test_every_test_the_table_names_exists() -> None:
    named = [
        f"{path}::{name}" for row in _table_rows().values() for path, name in NODE.findall(row)
    ]
    assert named
    assert [node for node in named if not _exists(node)] == []


def test_every_guarantee_row_names_at_least_one_test() -> None:
    assert [g for g, row in _table_rows().items() if not NODE.search(row)] == []


def test_every_mutant_breaks_a_listed_guarantee_and_names_existing_tests() -> None:
    rows = _table_rows()
    assert {m.guarantee for m in MUTANTS if m.guarantee} - set(rows) == set()
    missing = [(m.id, t) for m in MUTANTS for t in m.tests if not _exists(t)]
    assert missing == []
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)


def test_every_mutant_s_line_occurs_once_in_its_files() -> None:
    # CI runs only the --ci subset, so a stale mutant outside it would otherwise go unnoticed.
    assert [m.id for m in MUTANTS if locate(ROOT, m) is None] == []
