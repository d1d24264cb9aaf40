"""The order tests start in: the longest first, with the tests that mostly wait beside those that
keep a core busy.

`make test` hands tests to the pytest-xdist workers one at a time in collection order
(`--maxschedchunk 1`), so sorting the longest first is the longest-processing-time rule: the
short tests fill in at the end. A test's expected length is how long it took in the last run
(pytest's cache, under CACHE_KEY), else in the run recorded in DURATIONS_FILE (so that a fresh
clone, CI's, starts its longest tests first too), else a hint: a `slow` test before every other,
and among them one with a long `timeout` mark (the benchmarks' runs, the trainers' chains) first.
Tests that are not slow keep their order, so a module's fixtures are made as rarely as before.

The suite has more workers than cores, because most of its long tests wait (on a Slurm
allocation, an emulated Kaggle session, a deadline) with a core idle. Sorted by length alone,
the longest tests start together, and they are mostly such waiters: the cores idle while they
wait, and the tests that need a core queue up behind them. So the slow tests are dealt from two
queues, each longest first: the waiters, which kept under WAITING_SHARE of a core busy (their CPU
seconds over their seconds in a `make test-cpu` run, recorded in DURATIONS_FILE), and the rest. A
queue's next test starts when it would on a share of the workers of its own: as many as the cores
for the tests that keep a core busy, the others for the waiters. A test with no share recorded is
not a waiter.

`python -m tests.support.schedule` writes DURATIONS_FILE from the cache of the last `make test`,
with the shares of a core from `make test-cpu`'s report where there is one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

CACHE_KEY = "baton/durations"
DURATIONS_FILE = Path(__file__).with_name("durations.json")
CPU_REPORT = Path(".pytest_cache") / "cpu-report.jsonl"  # `make test-cpu`'s CPU_REPORT
# Only tests at least this long are written to DURATIONS_FILE: the order of shorter ones hardly
# moves the end of a run.
RECORDED_FROM_SECONDS = 2.0
# A test that keeps less than this share of one core busy, over its run, mostly waits.
WAITING_SHARE = 0.5
SHARE = "core_share"  # DURATIONS_FILE's key for it


@dataclass(frozen=True)
class Recorded:
    """What the last runs measured: each test's seconds, and for some the share of a core they
    kept busy (their CPU seconds over their seconds in the one run that measured both)."""

    seconds: Mapping[str, float]
    core_share: Mapping[str, float]

    def waits(self, nodeid: str) -> bool:
        return self.core_share.get(nodeid, WAITING_SHARE) < WAITING_SHARE


def start_order(items: list[pytest.Item], recorded: Recorded, workers: int, cores: int) -> None:
    """Sort `items` in place: slow tests first, the longest first, the waiters dealt beside the
    others as two queues on `workers` would start them; the other tests after, as collected."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    expected = {item.nodeid: _expected_seconds(item, recorded.seconds) for item in slow}
    slow.sort(key=lambda item: -expected[item.nodeid])
    waiters = [item for item in slow if recorded.waits(item.nodeid)]
    busy = [item for item in slow if not recorded.waits(item.nodeid)]
    if workers <= cores or not waiters or not busy:
        items[:] = [*slow, *rest]
        return
    starts = [
        *_starts(busy, expected, share=cores),
        *_starts(waiters, expected, share=workers - cores),
    ]
    starts.sort(key=lambda start: start[0])  # stable: at a tie, the busy test first
    items[:] = [*(item for _, item in starts), *rest]


def _starts(
    queue: list[pytest.Item], expected: Mapping[str, float], share: int
) -> list[tuple[float, pytest.Item]]:
    """When each of `queue`'s tests would start on `share` workers of its own, taken in order."""
    starts, queued = [], 0.0
    for item in queue:
        starts.append((queued / share, item))
        queued += expected[item.nodeid]
    return starts


def _expected_seconds(item: pytest.Item, seconds: Mapping[str, float]) -> float:
    if item.nodeid in seconds:
        return seconds[item.nodeid]
    timeout = item.get_closest_marker("timeout")
    return float(timeout.args[0]) if timeout is not None and timeout.args else 0.0


def workers_and_cores() -> tuple[int, int]:
    """The pytest-xdist workers of this run and this machine's cores. Only the workers collect
    under pytest-xdist; a run without it is one worker."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), os.cpu_count() or 1


def recorded(config: pytest.Config) -> Recorded:
    """Each test's seconds in the last run that recorded them (pytest's cache over the file),
    and the share of a core of those the file records it for."""
    committed = _committed()
    seconds = {name: entry["seconds"] for name, entry in committed.items()}
    core_share = {name: entry[SHARE] for name, entry in committed.items() if SHARE in entry}
    return Recorded(seconds={**seconds, **_cached(config)}, core_share=core_share)


def _committed() -> dict[str, dict[str, float]]:
    return json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}


def _cached(config: pytest.Config) -> dict[str, float]:
    cache = getattr(config, "cache", None)
    if cache is None:
        return {}
    recorded = cache.get(CACHE_KEY, {})
    return recorded if isinstance(recorded, dict) else {}


def record_durations(config: pytest.Config, measured: Mapping[str, float]) -> None:
    """Merge this run's seconds (setup, call and teardown) into the cache."""
    cache = getattr(config, "cache", None)
    if cache is None or not measured:
        return
    cache.set(CACHE_KEY, {**_cached(config), **measured})


def write_durations_file(root: Path) -> int:
    """Write the cache's durations of RECORDED_FROM_SECONDS or more to DURATIONS_FILE, each
    with the share of a core it kept busy from the CPU report under `root` (`make test-cpu`'s)
    if that has it, else as the file recorded it."""
    cached = json.loads((root / ".pytest_cache" / "v" / CACHE_KEY).read_text())
    core_share = {name: entry[SHARE] for name, entry in _committed().items() if SHARE in entry}
    report = root / CPU_REPORT
    if report.exists():
        for line in report.read_text().splitlines():
            cost = json.loads(line)
            if cost["wall"] > 0:
                core_share[cost["nodeid"]] = cost["cpu"] / cost["wall"]
    kept: dict[str, dict[str, float]] = {}
    for name, seconds in sorted(cached.items()):
        if seconds >= RECORDED_FROM_SECONDS:
            kept[name] = {"seconds": round(seconds, 1)}
            if name in core_share:
                kept[name][SHARE] = round(core_share[name], 2)
    lines = ",\n".join(f"{json.dumps(name)}: {json.dumps(entry)}" for name, entry in kept.items())
    DURATIONS_FILE.write_text(f"{{\n{lines}\n}}\n")  # a test a line
    return len(kept)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    print(f"{write_durations_file(root)} durations in {DURATIONS_FILE}")
