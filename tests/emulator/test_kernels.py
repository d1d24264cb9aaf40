"""Kernel pushes run for real: status, paged output, download, timeout, cancel, GPU limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kagglesdk import KaggleClient
from kagglesdk.kernels.types.kernels_enums import KernelWorkerStatus as S
from requests import HTTPError

from tests.emulator import calls
from tests.emulator.calls import TERMINAL
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator

WRITE_25_FILES = """
import json, os, sys, time
import worker.boundary.contract  # the project is importable, as if installed in Kaggle's image
time.sleep(0.4)
root = os.environ["BATON_KAGGLE_ROOT"]
for i in range(25):
    with open(f"part-{i:02d}.txt", "w") as f:
        f.write(f"part {i}")
os.makedirs("ckpt", exist_ok=True)
with open("ckpt/meta.json", "w") as f:
    json.dump({"root": root, "cwd": os.getcwd()}, f)
print("done writing")
"""

SLEEP_FOREVER = "import time\ntime.sleep(600)\n"


def test_push_runs_to_complete_and_output_is_paged_and_downloadable(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    response = calls.push(client, "alice/writer", WRITE_25_FILES)
    assert not response.error
    assert response.version_number == 1

    final, seen = calls.wait_for(client, "alice/writer", TERMINAL)
    assert final.status == S.COMPLETE, final.failure_message
    assert seen == [S.QUEUED, S.RUNNING, S.COMPLETE]

    first = calls.list_output(client, "alice/writer")
    assert len(first.files) == 20
    assert first.next_page_token
    assert "done writing" in json.loads(first.log)[0]["data"]
    second = calls.list_output(client, "alice/writer", page_token=first.next_page_token)
    assert len(second.files) == 6
    assert not second.next_page_token
    names = [f.file_name for f in first.files + second.files]
    assert names == sorted(names)
    assert "ckpt/meta.json" in names
    assert "__script__.py" not in names

    # KaggleApi follows every page and downloads each file from its URL.
    files, _ = emulator.kaggle_api().kernels_output("alice/writer", str(tmp_path / "out"))
    assert (tmp_path / "out" / "part-24.txt").read_text() == "part 24"
    meta = json.loads((tmp_path / "out" / "ckpt" / "meta.json").read_text())
    session = emulator.sessions("alice/writer")[0]
    assert meta == {"root": str(session.root), "cwd": str(session.root / "working")}
    assert len(files) == 27  # 26 outputs plus the log
    assert emulator.push_counts == {"alice/writer": 1}


def test_page_size_is_honoured(client: KaggleClient) -> None:
    calls.push(client, "alice/writer", WRITE_25_FILES)
    calls.wait_for(client, "alice/writer", TERMINAL)
    pages, token = [], None
    while True:
        listed = calls.list_output(client, "alice/writer", token, page_size=7)
        pages.append(len(listed.files))
        token = listed.next_page_token
        if not token:
            break
    assert pages == [7, 7, 7, 5]


def test_session_over_its_timeout_errors_and_loses_output(client: KaggleClient) -> None:
    script = "open('partial.txt', 'w').write('x')\nimport time\ntime.sleep(60)\n"
    calls.push(client, "alice/slow", script, timeout=1)
    final, _ = calls.wait_for(client, "alice/slow", TERMINAL)
    assert final.status == S.ERROR
    assert "timeout of 1 seconds" in final.failure_message
    assert calls.list_output(client, "alice/slow").files == []


def test_failing_script_reports_error_and_keeps_output(client: KaggleClient) -> None:
    calls.push(client, "alice/broken", "open('note.txt', 'w').write('x')\nraise SystemExit(3)\n")
    final, _ = calls.wait_for(client, "alice/broken", TERMINAL)
    assert final.status == S.ERROR
    assert final.failure_message == "The notebook exited with code 3."
    assert [f.file_name for f in calls.list_output(client, "alice/broken").files] == ["note.txt"]


def test_cancel_stops_a_running_session(emulator: Emulator, client: KaggleClient) -> None:
    calls.push(client, "alice/sleeper", SLEEP_FOREVER)
    calls.wait_for(client, "alice/sleeper", {S.RUNNING})
    assert calls.cancel(client, emulator.latest_session_id("alice/sleeper")).error_message == ""
    final, _ = calls.wait_for(client, "alice/sleeper", TERMINAL)
    assert final.status == S.CANCEL_ACKNOWLEDGED
    assert calls.list_output(client, "alice/sleeper").files == []
    again = calls.cancel(client, emulator.latest_session_id("alice/sleeper"))
    assert "is not running" in again.error_message


def test_every_push_is_a_new_version_and_get_kernel_shows_it(
    emulator: Emulator, client: KaggleClient
) -> None:
    for _ in range(2):
        calls.push(client, "alice/twice", "print('hi')\n")
    assert calls.get_kernel(client, "alice/twice").metadata.current_version_number == 2
    assert emulator.push_counts == {"alice/twice": 2}
    assert [s.version for s in emulator.sessions("alice/twice")] == [1, 2]


def test_third_gpu_push_is_refused_like_kaggle(emulator: Emulator, client: KaggleClient) -> None:
    for name in ("gpu-a", "gpu-b"):
        assert not calls.push(
            client, f"alice/{name}", SLEEP_FOREVER, machine_shape="NvidiaTeslaT4"
        ).error
    third = calls.push(client, "alice/gpu-c", SLEEP_FOREVER, machine_shape="NvidiaTeslaT4")
    assert third.error == "Maximum batch GPU session count of 2 reached"
    assert not calls.push(client, "alice/cpu", "print('cpu runs')\n").error
    assert emulator.push_counts == {"alice/gpu-a": 1, "alice/gpu-b": 1, "alice/cpu": 1}


def test_gpu_overflow_can_queue_instead(tmp_path: Path) -> None:
    with start_emulator(tmp_path, **FAST_EMULATOR, gpu_overflow="queue") as emulator:
        client = emulator.client()
        calls.push(client, "alice/gpu-a", SLEEP_FOREVER, machine_shape="NvidiaTeslaT4")
        calls.push(client, "alice/gpu-b", SLEEP_FOREVER, machine_shape="NvidiaTeslaT4")
        calls.push(client, "alice/gpu-c", "print('third')\n", machine_shape="NvidiaTeslaT4")
        calls.wait_for(client, "alice/gpu-b", {S.RUNNING})
        assert calls.status(client, "alice/gpu-c").status == S.QUEUED
        calls.cancel(client, emulator.latest_session_id("alice/gpu-a"))
        final, _ = calls.wait_for(client, "alice/gpu-c", TERMINAL)
        assert final.status == S.COMPLETE


def test_stuck_running_fault_hides_completion(emulator: Emulator, client: KaggleClient) -> None:
    emulator.faults.stuck_running.add("alice/stuck")
    calls.push(client, "alice/stuck", "print('quick')\n")
    calls.wait_for(client, "alice/stuck", {S.RUNNING})
    while emulator.sessions("alice/stuck")[0].active:
        calls.status(client, "alice/stuck")
    assert calls.status(client, "alice/stuck").status == S.RUNNING
    emulator.faults.stuck_running.clear()
    assert calls.status(client, "alice/stuck").status == S.COMPLETE


def test_another_users_private_kernel_is_forbidden(tmp_path: Path) -> None:
    users = {"alice": "alice-key", "bob": "bob-key"}
    with start_emulator(tmp_path, **FAST_EMULATOR, users=users) as emulator:
        calls.push(emulator.client("alice"), "alice/private", "print('mine')\n")
        with pytest.raises(HTTPError) as denied:
            calls.status(emulator.client("bob"), "alice/private")
        assert denied.value.response.status_code == 403
        with pytest.raises(HTTPError) as pushed:
            calls.push(emulator.client("bob"), "alice/private", "print('theirs')\n")
        assert pushed.value.response.status_code == 403
        assert emulator.push_counts == {"alice/private": 1}


def test_unknown_kernel_is_404(client: KaggleClient) -> None:
    with pytest.raises(HTTPError) as missing:
        calls.status(client, "alice/nothing-here")
    assert missing.value.response.status_code == 404
