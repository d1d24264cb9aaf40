"""`python -m tests.mutation.sweep`: mutmut's verdicts per module, as the table in docs/testing.md.

Run after `mutmut run` (`make mutate-sweep` does both). mutmut names each mutant
`package.module.x_function__mutmut_N`; this counts its verdicts per module.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

VERDICTS = ("killed", "timeout", "survived", "no tests", "not checked")


def module_of(mutant: str) -> str:
    """`orchestrator.engine.backoff.x_backoff_seconds__mutmut_3` -> the module's dotted name."""
    parts = mutant.split(".")
    return ".".join(part for part in parts if not part.startswith("x"))


def count(lines: list[str]) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for line in lines:
        name, _, verdict = line.strip().rpartition(": ")
        if not name or verdict not in VERDICTS:
            continue
        counts.setdefault(module_of(name), Counter())[verdict] += 1
    return counts


def table(counts: dict[str, Counter[str]]) -> str:
    rows = ["| module | mutants | killed | timeout | survived | no tests |", "| --- " * 6 + "|"]
    total: Counter[str] = Counter()
    for module in sorted(counts):
        c = counts[module]
        total += c
        rows.append(_row(f"`{module}`", c))
    rows.append(_row("**all**", total))
    return "\n".join(rows)


def _row(label: str, c: Counter[str]) -> str:
    cells = [c["killed"], c["timeout"], c["survived"], c["no tests"]]
    return f"| {label} | {sum(c.values())} | " + " | ".join(str(n) for n in cells) + " |"


def main() -> int:
    mutmut = Path(sys.executable).with_name("mutmut")
    out = subprocess.run(
        [str(mutmut), "results", "--all", "true"], capture_output=True, text=True, check=True
    ).stdout
    counts = count(out.splitlines())
    print(table(counts))
    unchecked = sum(c["not checked"] for c in counts.values())
    if unchecked:
        print(f"\n{unchecked} mutants not checked yet: run `mutmut run` again", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
