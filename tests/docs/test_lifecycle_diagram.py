"""The lifecycle drawings in docs/lifecycle.md match the transition tables edge for edge."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.lifecycle import JOB_TRANSITIONS, SEGMENT_TRANSITIONS

DOC = Path(__file__).parents[2] / "docs" / "lifecycle.md"
EDGE = re.compile(r"^\s*(\w+) --> (\w+)", re.MULTILINE)


def _drawn_edges() -> list[set[tuple[str, str]]]:
    blocks = re.findall(r"```mermaid\n(.*?)```", DOC.read_text(), re.DOTALL)
    return [set(EDGE.findall(block)) for block in blocks]


def _table_edges(table: dict) -> set[tuple[str, str]]:  # type: ignore[type-arg]
    return {(source.value, target.value) for source, targets in table.items() for target in targets}


def test_job_diagram_matches_the_table() -> None:
    assert _drawn_edges()[0] == _table_edges(JOB_TRANSITIONS)


def test_segment_diagram_matches_the_table() -> None:
    assert _drawn_edges()[1] == _table_edges(SEGMENT_TRANSITIONS)
