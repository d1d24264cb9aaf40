"""A session log is read from its end: `?tail=` on a 300 MiB log costs the server memory in
proportion to the tail asked for, not to the file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psutil

from orchestrator.backends.log_tail import last_line, read_from, read_tail
from tests.factories import ADMIN_TOKEN, job_spec, make_settings
from tests.support.serve import baton_serve
from worker.boundary.paths import LOG_FILE

MIB = 1024 * 1024


def test_the_tail_is_read_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "log"
    text = "first\n" + "x" * 10_000 + "\nTraceback…\nRuntimeError: é boom\n\n"
    path.write_text(text)
    for chars in (1, 8, 21, 10_020, 10**6):
        assert read_tail(path, chars) == text[-chars:]
    assert last_line(path) == "RuntimeError: é boom"
    assert last_line(tmp_path / "missing") == "no log"


def test_reading_from_an_offset_returns_each_whole_line_once(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes("one\ntwo é\nthr".encode())
    first = read_from(path, 0, ended=False)
    assert (first.text, first.next_offset) == ("one\ntwo é\n", 11)
    # The line still being written waits for its end, or for the session's.
    assert read_from(path, first.next_offset, ended=False).text == ""
    with open(path, "ab") as f:
        f.write(b"ee\nfour")
    second = read_from(path, first.next_offset, ended=False)
    assert second.text == "three\n"
    last = read_from(path, second.next_offset, ended=True)
    assert (last.text, last.next_offset) == ("four", path.stat().st_size)
    assert read_from(path, last.next_offset, ended=True).text == ""
    assert read_from(path, 10**9, ended=True).text == ""  # past the end: nothing, no error


def test_a_long_log_comes_in_bounded_chunks_that_join_up(tmp_path: Path) -> None:
    path = tmp_path / "log"
    text = "".join(f"line {n} " + "x" * (n % 50) + "\n" for n in range(2000)) + "y" * 300
    path.write_text(text)
    pieces, offset = [], 0
    while chunk := read_from(path, offset, ended=True, limit=256).text:
        assert len(chunk.encode()) <= 256
        assert chunk.endswith("\n") or chunk == "y" * 256 or chunk == "y" * 44
        pieces.append(chunk)
        offset = read_from(path, offset, ended=True, limit=256).next_offset
    assert "".join(pieces) == text


def test_tail_100_on_a_300_mib_log_keeps_the_servers_memory_growth_under_50_mib(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path / "data")
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with (
        baton_serve(settings, tmp_path / "serve.log", BATON_RECONCILE_INTERVAL_SECONDS="0.2") as (
            url,
            server,
        ),
        httpx.Client(base_url=url, headers=headers, timeout=60) as client,
    ):
        job_id = client.post("/api/v1/jobs", json=job_spec(total_steps=5)).json()["id"]
        deadline = time.monotonic() + 240
        while client.get(f"/api/v1/jobs/{job_id}").json()["state"] != "succeeded":
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.2)
        [log] = settings.sessions_dir.glob(f"{job_id}-*/{LOG_FILE}")
        with open(log, "ab") as f:  # 300 MiB of output (sparse: cheap to write, not to read)
            f.truncate(300 * MIB)
            f.seek(0, 2)
            f.write(b"\nthe last line\n")
        process = psutil.Process(server.pid)
        before = process.memory_info().rss
        samples = [before]
        done = threading.Event()

        def sample() -> None:  # the peak, during the requests: a big read is freed right after
            while not done.wait(0.005):
                samples.append(process.memory_info().rss)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for _ in range(4):
                answer = client.get(f"/api/v1/jobs/{job_id}/segments/0/log", params={"tail": 100})
                assert answer.status_code == 200
                assert answer.text.endswith("the last line\n")
                assert len(answer.text) == 100
        finally:
            done.set()
            sampler.join()
    growth = (max(samples) - before) / MIB
    print(f"server RSS {before / MIB:.0f} MiB, growth {growth:.1f} MiB")
    assert growth < 50
