"""`python -m benchmarks.load` stays runnable: a small run on this machine's PostgreSQL and a
private redis-server measures every endpoint and visits every job with beat and two workers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tests.benchmarks.conftest import EntryPoint
from tests.factories import require_services
from tests.support.databases import postgres_schema


@pytest.mark.integration
def test_a_small_load_run_measures_every_endpoint_and_visits_every_job(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    try:
        if shutil.which("redis-server") is None:
            raise FileNotFoundError("redis-server")
        with postgres_schema():
            pass  # reachable
    except (OperationalError, FileNotFoundError) as exc:
        if require_services():
            raise
        pytest.skip(f"PostgreSQL or redis-server missing: {exc}")
    out = tmp_path / "load.json"
    # fmt: off
    printed = entry_point(
        "benchmarks.load", "--jobs", "300", "--rate", "40", "--requests", "40",
        "--visit-timeout", "240", "--out", out,
    )
    # fmt: on
    record = json.loads(out.read_text())
    for rate in ("4_per_s", "40_per_s"):
        figures = record["api"][rate]
        assert set(figures) == {"trivial", "job", "list"}
        for endpoint in figures.values():
            assert endpoint["errors"] == 0
            assert 0 < endpoint["p50_ms"] <= endpoint["p99_ms"]
            for half in endpoint["halves"]:
                assert 0 < half["worst_second_p99_ms"] <= half["max_ms"]
                # Shares of the machine's CPU, each rounded to 0.1 (a phase of a few requests may
                # fall within one accounting tick: all 0 is possible).
                shares = half["machine"].values()
                assert all(share >= 0 for share in shares)
                assert sum(shares) <= 100.5
    assert record["visits"]["visited"] == 300
    assert record["visits"]["all_visited"] is True
    (run,) = record["runs"]
    assert run["date"].endswith("UTC")
    assert len(run["load_average_at_start"]) == len(run["load_average_at_end"]) == 3
    # Each of the targets counted half by half at the full rate: 2 halves each.
    assert run["verdict"]["halves"] == dict.fromkeys(
        ("job_p99", "job_worst_second", "list_served", "list_p99"), 2
    )
    assert isinstance(run["verdict"]["visits_met"], bool)
    # Every half of the run printed as a table row: 3 endpoints x 2 halves x 2 rates.
    rows = [line for line in printed.splitlines() if line.startswith(("| 4/s", "| 40/s"))]
    assert len(rows) == 12
