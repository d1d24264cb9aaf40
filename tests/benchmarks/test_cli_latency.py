"""`python -m benchmarks.cli_latency` stays runnable: a tiny run against a real server times
every command and reports each against a bare `python -c pass`."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.cli_latency import report, run

COMMANDS = ["python -c pass", "baton --help", "baton --version", "baton jobs"]


# The benchmark starts a server and runs the CLI as processes.
@pytest.mark.slow
def test_a_tiny_run_times_every_command_and_reports_them(tmp_path: Path) -> None:
    figures = run(runs=2, jobs=2, root=tmp_path)
    assert list(figures["commands"]) == COMMANDS
    for row in figures["commands"].values():
        assert 0 < row["median_ms"] <= row["p90_ms"]
        assert row["cpu_median_ms"] > 0
    text = report(figures)
    for command in COMMANDS:
        assert command in text
    assert "2 runs each, 2 jobs listed" in text
