"""What `baton kaggle check` measured reaches the kernel: the mount looked at first, and the
boot offset as a floor under the session's origin."""

from __future__ import annotations

from pathlib import Path

from worker.kaggle_session import find_mounted_checkpoint, session_origin
from worker.proctime import process_start_time

ARCHIVE = "checkpoint-s00000-step10-abc.tar"


def test_a_measured_mount_deeper_than_the_search_is_found(tmp_path: Path) -> None:
    measured = tmp_path / "input" / "a" / "b" / "c" / "d" / "baton-ckpt-j1"
    (measured / "versions" / "3").mkdir(parents=True)
    (measured / "versions" / "3" / ARCHIVE).write_bytes(b"tar")
    assert find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE) is None
    found = find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE, measured)
    assert found == measured / "versions" / "3" / ARCHIVE


def test_the_measured_boot_offset_is_a_floor_under_the_origin() -> None:
    own = process_start_time()
    slack = 0.1  # each reading of /proc converts jiffies to epoch seconds afresh
    assert session_origin() <= own + slack
    assert session_origin(measured_boot_seconds=45.0) <= own - 45.0 + slack
    # An implausible measurement is capped like the live reading.
    assert session_origin(measured_boot_seconds=1e9) >= own - 600.0 - slack
