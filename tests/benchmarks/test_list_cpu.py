"""`python -m benchmarks.list_cpu` stays runnable: a small run on this machine's PostgreSQL
measures every request and its baseline (the benchmark itself checks that both answer the
same), and counts the statements each one ran."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.benchmarks.conftest import EntryPoint
from tests.support.databases import enter_postgres, postgres_schema

# The reads as served now, and as they were (the baseline): the token, then one statement.
STATEMENTS = {
    "livez": 0,
    "get_job": 2,
    "get_job_baseline": 3,
    "list_offset": 2,
    "list_offset_baseline": 4,
    "list_cursor": 2,
    "list_read": 1,
    "list_read_baseline": 3,
}


@pytest.mark.integration
def test_a_small_run_measures_every_request_against_its_baseline(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        enter_postgres(stack, postgres_schema)  # reachable, or skipped (failed in CI)
    out = tmp_path / "list_cpu.json"
    # fmt: off
    printed = entry_point(
        "benchmarks.list_cpu", "--jobs", "200", "--rounds", "1", "--calls", "3", "--out", out,
    )
    # fmt: on
    record = json.loads(out.read_text())
    figures = record["cpu_ms_per_request"]
    assert {name: figure["statements"] for name, figure in figures.items()} == STATEMENTS
    for figure in figures.values():
        assert 0 < figure["cpu_ms_min"] <= figure["cpu_ms_median"]
    assert set(record["baseline_over_now"]) == {"get_job", "list_offset", "list_read"}
    assert "list_offset: the baseline costs" in printed
