"""`python -m benchmarks.kaggle_handoff` stays runnable: one small size, both transports side by
side, and the figures hold together."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.conftest import EntryPoint


def test_both_transports_and_both_installs_run_and_report(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = tmp_path / "handoff.json"
    # 1 GB stands for 1 MB on disk; every emulated duration divided by 1000.
    printed = entry_point(
        "benchmarks.kaggle_handoff",
        "--sizes", "1", "--time-factor", "1000", "--size-scale", "1000", "--out", out,
    )  # fmt: skip
    rows = {row["transport"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"orchestrator", "kernel"}
    # Today's path moves the checkpoint down and up again: about 2 GB at the scale it stands for.
    assert rows["orchestrator"]["orchestrator_bytes"] >= 2 * 10**9
    # The in-kernel path moves only metadata through the orchestrator.
    assert rows["kernel"]["orchestrator_bytes"] < rows["orchestrator"]["orchestrator_bytes"] / 100
    assert rows["kernel"]["publish_share"] > 0
    assert rows["orchestrator"]["publish_share"] == 0
    assert "of today's" in printed
    # In the same run, the requirements installed side by side: every session of today's path
    # downloads them; with the wheel set only the first does, and the later ones save start-up.
    requirements = json.loads(out.read_text())["requirements"]
    by_path = {
        wheel_set: [r for r in requirements["rows"] if r["wheel_set"] is wheel_set]
        for wheel_set in (False, True)
    }
    assert [r["install_from"] for r in by_path[False]] == ["index"] * 3
    assert all(r["downloads"] > 0 for r in by_path[False])
    assert [r["install_from"] for r in by_path[True]] == ["built", "offline", "offline"]
    assert [r["downloads"] for r in by_path[True]][1:] == [0, 0]
    assert requirements["saved_seconds_real"] > 0
    assert "start-up saved per session after the first" in printed
