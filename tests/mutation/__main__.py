"""`python -m tests.mutation`: run the mutants (all, --guarantees, --ci or --only IDs), report."""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.mutation.mutants import MUTANTS, Mutant
from tests.mutation.runner import Outcome, Verdict, baseline, check, scratch_copy

SUMMARY_START = "<!-- mutation-summary:start -->"
SUMMARY_END = "<!-- mutation-summary:end -->"


def select(args: argparse.Namespace) -> list[Mutant]:
    chosen = [m for m in MUTANTS if not args.guarantees or m.guarantee is not None]
    if args.ci:
        chosen = [m for m in chosen if m.ci]
    if args.only:
        unknown = set(args.only) - {m.id for m in MUTANTS}
        if unknown:
            raise SystemExit(f"unknown mutants: {sorted(unknown)}")
        chosen = [m for m in chosen if m.id in args.only]
    return chosen


def summary(outcomes: list[Outcome], equivalent: list[Mutant], title: str) -> str:
    modules = list(
        dict.fromkeys([o.mutant.module for o in outcomes] + [m.module for m in equivalent])
    )
    counts: dict[str, Counter[str]] = {module: Counter() for module in modules}
    for outcome in outcomes:
        verdict = Verdict.KILLED if outcome.verdict is Verdict.TIMEOUT else outcome.verdict
        counts[outcome.mutant.module][verdict] += 1
    for mutant in equivalent:
        counts[mutant.module]["equivalent"] += 1
    lines = [
        title,
        "",
        "| module | killed | survived | equivalent | stale |",
        "| --- | --- | --- | --- | --- |",
    ]
    for module, count in counts.items():
        lines.append(
            f"| {module} | {count['killed']} | {count['survived']} | {count['equivalent']} "
            f"| {count['stale']} |"
        )
    total: Counter[str] = sum(counts.values(), Counter())
    lines.append(
        f"| **all** | {total['killed']} | {total['survived']} | {total['equivalent']} "
        f"| {total['stale']} |"
    )
    lines += [
        "",
        "| mutant | guarantee | verdict | caught by | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        mutant = outcome.mutant
        caught = f"`{outcome.killed_by}`" if outcome.killed_by else "-"
        lines.append(
            f"| `{mutant.id}` | {mutant.guarantee or '-'} | {outcome.verdict} | {caught} "
            f"| {outcome.seconds:.0f} |"
        )
    for mutant in equivalent:
        lines.append(
            f"| `{mutant.id}` | {mutant.guarantee or '-'} | equivalent | {mutant.equivalent} | - |"
        )
    return "\n".join(lines) + "\n"


def write_summary(path: Path, text: str) -> None:
    document = path.read_text()
    pattern = re.compile(re.escape(SUMMARY_START) + ".*?" + re.escape(SUMMARY_END), re.DOTALL)
    if not pattern.search(document):
        raise SystemExit(f"{path} has no {SUMMARY_START} ... {SUMMARY_END} block")
    block = f"{SUMMARY_START}\n{text}{SUMMARY_END}"
    path.write_text(pattern.sub(lambda _: block, document))


@contextmanager
def scratch_copies(count: int) -> Iterator[list[Path]]:
    with ExitStack() as stack:
        yield [stack.enter_context(scratch_copy()) for _ in range(count)]


def check_all(mutants: list[Mutant], copies: list[Path]) -> list[Outcome]:
    """Each mutant in whichever copy is free (a copy holds one mutant at a time); the outcomes in
    the mutants' order, each reported as it comes."""
    free: queue.Queue[Path] = queue.Queue()
    for copy in copies:
        free.put(copy)
    finished = itertools.count(1)

    def check_in_a_free_copy(mutant: Mutant) -> Outcome:
        copy = free.get()
        try:
            outcome = check(copy, mutant)
        finally:
            free.put(copy)
        print(
            f"[{next(finished)}/{len(mutants)}] {mutant.id}: {outcome.verdict} "
            f"({outcome.seconds:.0f} s)",
            flush=True,
        )
        if outcome.verdict in (Verdict.SURVIVED, Verdict.STALE):
            print(outcome.detail, file=sys.stderr)
        return outcome

    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        return list(pool.map(check_in_a_free_copy, mutants))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__)
    parser.add_argument("--guarantees", action="store_true", help="only the guarantee table's")
    parser.add_argument("--ci", action="store_true", help="only the fast subset CI runs")
    parser.add_argument("--only", nargs="+", metavar="ID", help="only these mutants")
    parser.add_argument("--baseline", action="store_true", help="first run the tests unmutated")
    parser.add_argument("--write-summary", type=Path, metavar="FILE", help="e.g. docs/testing.md")
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        metavar="N",
        help="mutants checked at once, each in a scratch copy of its own (default: one a core)",
    )
    args = parser.parse_args(argv)
    chosen = select(args)
    runnable = [m for m in chosen if m.equivalent is None]
    equivalent = [m for m in chosen if m.equivalent is not None]
    started = time.monotonic()
    with scratch_copies(max(1, min(args.jobs, len(runnable)))) as copies:
        if args.baseline:
            tests = list(dict.fromkeys(test for m in runnable for test in m.tests))
            passed, output = baseline(copies[0], tests, timeout=1800)
            if not passed:
                print(output, file=sys.stderr)
                print(
                    "the unmutated tree fails these tests: no verdict is possible", file=sys.stderr
                )
                return 2
        outcomes = check_all(runnable, copies)
    minutes = (time.monotonic() - started) / 60
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_minutes = (children.ru_utime + children.ru_stime) / 60
    scope = "CI subset" if args.ci else "guarantee-table mutants" if args.guarantees else "all"
    title = f"Mutation run ({scope}): {minutes:.1f} min wall, {cpu_minutes:.1f} min CPU"
    text = summary(outcomes, equivalent, title)
    print(text)
    if args.write_summary:
        write_summary(args.write_summary, text)
    bad = [o for o in outcomes if o.verdict in (Verdict.SURVIVED, Verdict.STALE)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
