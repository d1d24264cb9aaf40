"""The order `make test` starts tests in: the longest first, the waiters dealt beside the tests
that keep a core busy, the fast tests last in their own order; and the file a fresh clone reads
it from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support import schedule
from tests.support.schedule import Recorded, start_order


class _Item:
    """What the order reads of a pytest item: its node id and its marks."""

    def __init__(self, nodeid: str, *, slow: bool = True, timeout: float | None = None) -> None:
        self.nodeid = nodeid
        self._marks = {"slow": pytest.mark.slow.mark} if slow else {}
        if timeout is not None:
            self._marks["timeout"] = pytest.mark.timeout(timeout).mark

    def get_closest_marker(self, name: str) -> Any:
        return self._marks.get(name)


def _ordered(items: list[_Item], recorded: Recorded, workers: int, cores: int = 2) -> list[str]:
    pytest_items = cast(list[pytest.Item], items)
    start_order(pytest_items, recorded, workers, cores)
    return [item.nodeid for item in pytest_items]


# Two tests that keep a core busy and three that wait.
SECONDS = {"busy_a": 60.0, "busy_b": 40.0, "wait_a": 200.0, "wait_b": 100.0, "wait_c": 90.0}
CORE_SHARE = {"busy_a": 0.9, "busy_b": 0.95, "wait_a": 0.03, "wait_b": 0.1, "wait_c": 0.03}


def test_waiters_start_beside_busy_tests_instead_of_all_together() -> None:
    items = [_Item(name) for name in SECONDS] + [
        _Item("fast_1", slow=False),
        _Item("fast_0", slow=False),
    ]
    order = _ordered(items, Recorded(SECONDS, CORE_SHARE), workers=4)
    # Longest first would start the three waiters together with one busy test; dealt from
    # two queues, on two workers each, both busy tests start in the first wave beside the two
    # longest waiters, and the last waiter when the first of those would have ended.
    assert order[:5] == ["busy_a", "wait_a", "busy_b", "wait_b", "wait_c"]
    # Each queue keeps its longest first, and the fast tests keep their collected order.
    assert order.index("busy_a") < order.index("busy_b")
    assert order.index("wait_a") < order.index("wait_b") < order.index("wait_c")
    assert order[-2:] == ["fast_1", "fast_0"]


def test_without_cpu_figures_or_spare_workers_the_longest_start_first() -> None:
    longest_first = ["wait_a", "wait_b", "wait_c", "busy_a", "busy_b"]
    items = [_Item(name) for name in SECONDS]
    assert _ordered(items, Recorded(SECONDS, {}), workers=4) == longest_first
    items = [_Item(name) for name in SECONDS]
    assert _ordered(items, Recorded(SECONDS, CORE_SHARE), workers=2) == longest_first


def test_an_unrecorded_slow_test_is_placed_by_its_timeout_mark() -> None:
    items = [_Item("short"), _Item("chain", timeout=900), _Item("unmarked")]
    assert _ordered(items, Recorded({"short": 5.0}, {}), workers=4) == [
        "chain",
        "short",
        "unmarked",
    ]


def test_the_file_takes_this_runs_seconds_and_the_cpu_reports_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"old": {"seconds": 9.0, "core_share": 0.9}}))
    monkeypatch.setattr(schedule, "DURATIONS_FILE", durations)
    cache = tmp_path / ".pytest_cache" / "v" / schedule.CACHE_KEY
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"old": 12.34, "measured": 30.0, "quick": 0.5}))
    (tmp_path / schedule.CPU_REPORT).write_text(
        json.dumps({"nodeid": "measured", "wall": 20.0, "cpu": 3.0, "own": 1.0}) + "\n"
    )
    assert schedule.write_durations_file(tmp_path) == 2
    assert json.loads(durations.read_text()) == {
        "measured": {"seconds": 30.0, "core_share": 0.15},
        "old": {"seconds": 12.3, "core_share": 0.9},  # its share as recorded: the report has none
    }
    # What a fresh clone reads: the seconds and which tests wait.
    recorded = schedule.recorded(cast(pytest.Config, object()))
    assert recorded.seconds == {"measured": 30.0, "old": 12.3}
    assert recorded.waits("measured")
    assert not recorded.waits("old")
