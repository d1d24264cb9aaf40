"""A session log is read from its end: `?tail=` on a 300 MiB log costs the server memory in
proportion to the tail asked for, not to the file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psutil

from orchestrator.backends.log_tail import last_line, read_tail
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
