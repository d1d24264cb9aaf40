"""Starting the emulator: KaggleEnv.TEST's fixed port, and `python -m tests.kaggle_emulator`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kagglesdk import KaggleClient, KaggleEnv

from tests.emulator import calls
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import start_emulator
from tests.kaggle_emulator.options import REPO_ROOT
from tests.support.ports import free_port

# An unmodified client inside a session: kagglesdk's own environment switch and the session's
# own token, exactly as a kernel on Kaggle would build it.
_CALL_BACK = """
from kagglesdk import KaggleClient
from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest
client = KaggleClient(username="alice", password="alice-key")
stats = client.kernels.kernels_api_client.get_accelerator_quota_statistics(
    ApiGetAcceleratorQuotaStatisticsRequest()
)
print("allowed", stats.gpu_quota.total_time_allowed.total_seconds())
"""


def test_a_session_reaches_the_emulator_on_its_ephemeral_port(tmp_path: Path) -> None:
    with start_emulator(tmp_path, **FAST_EMULATOR) as emulator:
        assert emulator.port != 7777
        client = emulator.client()
        calls.push(client, "alice/call-back", _CALL_BACK, internet=True)
        final, _ = calls.wait_for(client, "alice/call-back", calls.TERMINAL)
        assert final.status.name == "COMPLETE", final.failure_message
        log = calls.list_output(client, "alice/call-back").log
        assert "allowed 108000.0" in log
        # The session's own token (KAGGLE_API_V1_TOKEN) won over the key it was given:
        # kagglesdk's precedence, which Baton's kernels must override.
        assert emulator.callers == {"alice", "kaggle-session-1"}


def test_command_line_entry_point(tmp_path: Path) -> None:
    port = free_port()
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
