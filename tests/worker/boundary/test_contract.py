"""The session's JSON records: written whole, whoever else writes the same file at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from worker.boundary.contract import write_json_atomic

WRITES = 300


def test_two_writers_of_one_record_never_break_each_other_or_its_readers(tmp_path: Path) -> None:
    """A supervisor and its launcher both write supervisor.pid as the session starts. Each write
    lands whole (no writer fails, none truncates the other's), and a reader meanwhile sees
    either no file or one of the records written, never half of one."""
    record = tmp_path / "supervisor.pid"
    written = [{"writer": w, "n": n} for w in (1, 2) for n in range(WRITES)]
    failures: list[BaseException] = []
    seen: list[dict[str, int]] = []
    writing = threading.Event()

    def write(writer: int) -> None:
        try:
            for n in range(WRITES):
                write_json_atomic(record, {"writer": writer, "n": n})
        except BaseException as exc:  # what the test reports: any failure of a writer
            failures.append(exc)

    def read() -> None:
        while writing.is_set():
            if record.exists():
                seen.append(json.loads(record.read_text()))

    writing.set()
    writers = [threading.Thread(target=write, args=(w,)) for w in (1, 2)]
    reader = threading.Thread(target=read)
    for thread in [*writers, reader]:
        thread.start()
    for thread in writers:
        thread.join()
    writing.clear()
    reader.join()

    assert failures == []
    assert json.loads(record.read_text()) in written
    assert all(read_back in written for read_back in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["supervisor.pid"]  # no temp file left
