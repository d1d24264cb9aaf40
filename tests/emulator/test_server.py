"""Starting the emulator: KaggleEnv.TEST's fixed port, and `python -m tests.kaggle_emulator`."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kagglesdk import KaggleClient, KaggleEnv

from tests.emulator import calls
from tests.emulator.conftest import FAST
from tests.factories import require_services
from tests.kaggle_emulator import start_emulator
from tests.kaggle_emulator.options import REPO_ROOT


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_an_unmodified_test_env_client_reaches_port_7777(tmp_path: Path) -> None:
    if not _port_free(7777):
        if require_services():  # in CI nothing else may hold it: a skip would hide the test
            pytest.fail("port 7777 is taken")
        pytest.skip("port 7777 is taken")
    with start_emulator(tmp_path, **FAST, port=7777):
        client = KaggleClient(env=KaggleEnv.TEST, username="alice", password="alice-key")
        assert calls.quota(client).gpu_quota.total_time_allowed.total_seconds() == 30 * 3600


def test_command_line_entry_point(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "tests.kaggle_emulator", "--port", str(port)]
    command += ["--root", str(tmp_path), "--user", "carol:carol-key"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert f"localhost:{port}" in process.stdout.readline()
        client = KaggleClient(env=KaggleEnv.TEST, username="carol", password="carol-key")
        client.http_client()._endpoint = f"http://localhost:{port}"
        assert calls.quota(client).gpu_quota is not None
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
