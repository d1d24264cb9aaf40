"""The lifecycle as the README and docs/lifecycle.md promise it, written out by hand.

This is the tests' independent oracle: it never reads `orchestrator.lifecycle`'s tables, so a wrong
edge added to (or dropped from) the code fails the tests instead of being echoed by them. One line
per source state; adding a state is one line here (plus its arrow from the states that reach it).
"""

from __future__ import annotations

JOB_EDGES = """
queued    -> running waiting paused cancelled failed
running   -> queued succeeded failed paused cancelled
waiting   -> queued paused cancelled failed
paused    -> queued cancelled
failed    -> queued
succeeded ->
cancelled ->
"""

SEGMENT_EDGES = """
launching  -> running failed cancelled abandoned
running    -> succeeded failed cancelling cancelled abandoned
cancelling -> cancelled abandoned
succeeded  ->
failed     ->
cancelled  ->
abandoned  ->
"""

# Segments that may still hold a backend session (and so a slot): a cancelled Kaggle session
# keeps its GPU slot until it is seen to end.
ACTIVE_SEGMENT_STATES = frozenset({"launching", "running", "cancelling"})
# Jobs no reconcile moves on its own (only a user's resume leaves `failed`).
FINISHED_JOB_STATES = frozenset({"succeeded", "failed", "cancelled"})


def parse_edges(text: str) -> dict[str, frozenset[str]]:
    table: dict[str, frozenset[str]] = {}
    for line in text.strip().splitlines():
        source, _, targets = line.partition("->")
        table[source.strip()] = frozenset(targets.split())
    return table


JOB = parse_edges(JOB_EDGES)
SEGMENT = parse_edges(SEGMENT_EDGES)


def allowed(table: dict[str, frozenset[str]], source: str, target: str) -> bool:
    return target in table[source]


def edges(table: dict[str, frozenset[str]]) -> set[tuple[str, str]]:
    return {(source, target) for source, targets in table.items() for target in targets}
