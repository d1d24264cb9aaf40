"""The order tests start in: the longest first, so that no long test starts last on a worker.

`make test` hands tests to the pytest-xdist workers one at a time in collection order
(`--maxschedchunk 1`), so sorting the longest first is the longest-processing-time rule: the
short tests fill in at the end. A test's expected length is how long it took in the last run
(pytest's cache, under CACHE_KEY), else in the run recorded in DURATIONS_FILE (so that a fresh
clone, CI's, starts its longest tests first too), else a hint: a `slow` test before every other,
and among them one with a long `timeout` mark (the benchmarks' runs, the trainers' chains) first.
Tests that are not slow keep their order, so a module's fixtures are made as rarely as before.

`python -m tests.support.schedule` writes DURATIONS_FILE from the cache of the last `make test`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

CACHE_KEY = "baton/durations"
DURATIONS_FILE = Path(__file__).with_name("durations.json")
# Only tests at least this long are written to DURATIONS_FILE: the order of shorter ones hardly
# moves the end of a run.
RECORDED_FROM_SECONDS = 2.0


def longest_first(items: list[pytest.Item], durations: Mapping[str, float]) -> None:
    """Sort `items` in place: slow tests first, the longest of them first."""
    items.sort(key=lambda item: _start_key(item, durations))


def _start_key(item: pytest.Item, durations: Mapping[str, float]) -> tuple[bool, float]:
    if item.get_closest_marker("slow") is None:
        return True, 0.0
    if item.nodeid in durations:
        return False, -durations[item.nodeid]
    timeout = item.get_closest_marker("timeout")
    return False, -float(timeout.args[0]) if timeout is not None and timeout.args else 0.0


def recorded_durations(config: pytest.Config) -> dict[str, float]:
    """Each test's seconds in the last run that recorded them: pytest's cache over the file."""
    committed = json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}
    return {**committed, **_cached(config)}


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


def write_durations_file(cache_dir: Path) -> int:
    """Write the cache's durations of RECORDED_FROM_SECONDS or more to DURATIONS_FILE."""
    cached = json.loads((cache_dir / "v" / CACHE_KEY).read_text())
    kept = {
        name: round(seconds, 1)
        for name, seconds in sorted(cached.items())
        if seconds >= RECORDED_FROM_SECONDS
    }
    DURATIONS_FILE.write_text(json.dumps(kept, indent=0) + "\n")
    return len(kept)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    print(f"{write_durations_file(root / '.pytest_cache')} durations in {DURATIONS_FILE}")
