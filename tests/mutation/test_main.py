"""The mutant runner: mutants checked side by side in copies of their own come back in order, each
with its own verdict, and every copy is left as it was."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.mutation.__main__ import check_all
from tests.mutation.mutants import Mutant
from tests.mutation.runner import Verdict

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef name():\n    return 'calc'\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def tiny_tree(folder: Path) -> Path:
    folder.mkdir()
    (folder / "calc.py").write_text(SOURCE)
    (folder / "test_calc.py").write_text(TESTS)
    return folder


def mutant(mutant_id: str, before: str, after: str) -> Mutant:
    return Mutant(mutant_id, "calc", "calc.py", before, after, ("test_calc.py",), timeout=60)


@pytest.mark.slow
def test_mutants_checked_in_two_copies_keep_their_order_and_verdicts(tmp_path: Path) -> None:
    copies = [tiny_tree(tmp_path / "one"), tiny_tree(tmp_path / "two")]
    mutants = [
        mutant("subtracts", "return a + b", "return a - b"),
        mutant("renamed", "return 'calc'", "return 'XXcalcXX'"),
        mutant("gone", "return a * b", "return a + b"),
        mutant("multiplies", "return a + b", "return a * b"),
        replace(mutant("hangs", "return a + b", "while True: pass"), timeout=5),
    ]

    outcomes = check_all(mutants, copies)

    assert [(o.mutant.id, o.verdict) for o in outcomes] == [
        ("subtracts", Verdict.KILLED),
        ("renamed", Verdict.SURVIVED),
        ("gone", Verdict.STALE),
        ("multiplies", Verdict.KILLED),
        ("hangs", Verdict.TIMEOUT),
    ]
    assert outcomes[0].killed_by == "test_calc.py::test_add"
    for copy in copies:
        assert (copy / "calc.py").read_text() == SOURCE
