"""Kaggle user secrets: attached ones read through kaggle_secrets, others refused, none leaked."""

from __future__ import annotations

import hashlib
import json
import secrets
import stat
import sys
from pathlib import Path

import pytest
from kagglesdk import KaggleClient
from kagglesdk.kernels.types.kernels_enums import KernelWorkerStatus as S

from tests.emulator import calls
from tests.emulator.calls import TERMINAL
from tests.kaggle_emulator import Emulator, EmulatorOptions
from tests.kaggle_emulator.runner import SupervisedRunner
from tests.kaggle_emulator.state import EmulatorState
from tests.kaggle_emulator.user_secrets import VALUES_FILE, UserSecrets

# Reads each label named in labels.json and records a digest or the exception, never the value.
READ_SECRETS = """
import hashlib, json, os
from kaggle_secrets import UserSecretsClient
client = UserSecretsClient()
outcome = {}
for label in %r:
    try:
        value = client.get_secret(label)
        outcome[label] = {"sha256": hashlib.sha256(value.encode()).hexdigest()}
    except Exception as error:
        outcome[label] = {"error": type(error).__name__, "message": str(error)}
with open("outcome.json", "w") as f:
    json.dump(outcome, f)
print("read", sorted(outcome))
"""

# Uses its attached API key to call the emulator back, as a self-chaining segment does.
CALL_BACK = """
import json, os
from kaggle_secrets import UserSecretsClient
from kagglesdk import KaggleClient, KaggleEnv
from kagglesdk.kernels.types.kernels_api_service import ApiGetKernelSessionStatusRequest

url = os.environ["BATON_KAGGLE_API_URL"]
key = UserSecretsClient().get_secret("BATON_KAGGLE_KEY")
# Baton's own override: kagglesdk would otherwise prefer the session's KAGGLE_API_V1_TOKEN.
from worker.kaggle_access.client import authenticate_as
client = authenticate_as(KaggleClient(env=KaggleEnv.TEST), "alice", key)
request = ApiGetKernelSessionStatusRequest()
request.user_name, request.kernel_slug = "alice", "chain"
status = client.kernels.kernels_api_client.get_kernel_session_status(request).status
with open("callback.json", "w") as f:
    json.dump({"url": url, "status": status.name}, f)
"""


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _run(client: KaggleClient, ref: str, script: str) -> None:
    response = calls.push(client, ref, script, internet=True)
    assert not response.error
    final, _ = calls.wait_for(client, ref, TERMINAL, version=response.version_number)
    assert final.status == S.COMPLETE, final.failure_message


def _outcome(emulator: Emulator, ref: str) -> dict[str, dict[str, str]]:
    session = emulator.sessions(ref)[-1]
    result: dict[str, dict[str, str]] = json.loads(
        (session.root / "working" / "outcome.json").read_text()
    )
    return result


def _assert_nowhere(value: str, emulator_root: Path, client: KaggleClient, ref: str) -> None:
    """The value is in no file but the sessions' own 0600 values files, and not in the output."""
    listed = calls.list_output(client, ref)
    assert value not in (listed.log or "")
    assert all(value not in f.file_name for f in listed.files)
    for path in emulator_root.rglob("*"):
        if not path.is_file():
            continue
        if path.name == VALUES_FILE:
            assert "working" not in path.relative_to(emulator_root).parts
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            continue
        assert value.encode() not in path.read_bytes(), path


def test_an_attached_secret_is_read_in_every_version_and_leaks_nowhere(
    emulator: Emulator, client: KaggleClient, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    value = secrets.token_hex(16)
    emulator.set_secret("alice", "BATON_KAGGLE_KEY", value)
    emulator.attach_secret("alice/reader", "BATON_KAGGLE_KEY")  # before the first push

    script = READ_SECRETS % ["BATON_KAGGLE_KEY"]
    _run(client, "alice/reader", script)
    assert _outcome(emulator, "alice/reader") == {"BATON_KAGGLE_KEY": {"sha256": _sha256(value)}}
    _run(client, "alice/reader", script)  # a new version keeps the attachment
    assert _outcome(emulator, "alice/reader") == {"BATON_KAGGLE_KEY": {"sha256": _sha256(value)}}

    listed = calls.list_output(client, "alice/reader")
    assert [f.file_name for f in listed.files] == ["outcome.json"]
    files, _ = emulator.kaggle_api().kernels_output("alice/reader", str(tmp_path / "out"))
    assert all(value not in Path(f).read_text() for f in files)
    _assert_nowhere(value, tmp_path / "emulator", client, "alice/reader")
    assert value not in repr(emulator.sessions()) + repr(emulator.state.secrets)
    captured = capfd.readouterr()
    assert value not in captured.out + captured.err


def test_a_secret_not_attached_to_the_kernel_raises_backend_error(
    emulator: Emulator, client: KaggleClient
) -> None:
    emulator.set_secret("alice", "ATTACHED", "a-value")
    emulator.set_secret("alice", "NOT_ATTACHED", "n-value")
    emulator.set_secret("bob", "BOBS", "b-value")
    emulator.attach_secret("alice/probe", "ATTACHED")
    emulator.attach_secret("alice/probe", "BOBS")  # attached, but alice has no such secret
    emulator.attach_secret("alice/other", "NOT_ATTACHED")  # attached to another kernel

    _run(client, "alice/probe", READ_SECRETS % ["ATTACHED", "NOT_ATTACHED", "BOBS", ""])

    outcome = _outcome(emulator, "alice/probe")
    kernel_id = emulator.sessions("alice/probe")[0].kernel_id
    assert outcome["ATTACHED"] == {"sha256": _sha256("a-value")}
    for label in ("NOT_ATTACHED", "BOBS"):
        assert outcome[label]["error"] == "BackendError"
        assert outcome[label]["message"].startswith("Unexpected response from the service.")
        wanted = f"No user secrets exist for kernel id {kernel_id} and label {label}."
        assert wanted in outcome[label]["message"]
    assert outcome[""] == {"error": "ValidationError", "message": "Label must be non-empty."}
    values_file = emulator.sessions("alice/probe")[0].root / VALUES_FILE
    assert json.loads(values_file.read_text())["secrets"] == {"ATTACHED": "a-value"}


def test_a_kernel_without_attachments_still_imports_kaggle_secrets(
    emulator: Emulator, client: KaggleClient
) -> None:
    emulator.set_secret("alice", "KEY", "k-value")
    _run(client, "alice/bare", READ_SECRETS % ["KEY"])
    assert _outcome(emulator, "alice/bare")["KEY"]["error"] == "BackendError"


def test_a_session_calls_the_emulator_back_with_its_attached_key(
    emulator: Emulator, client: KaggleClient
) -> None:
    emulator.set_secret("alice", "BATON_KAGGLE_KEY", "alice-key")
    emulator.attach_secret("alice/chain", "BATON_KAGGLE_KEY")
    _run(client, "alice/chain", CALL_BACK)
    session = emulator.sessions("alice/chain")[0]
    called = json.loads((session.root / "working" / "callback.json").read_text())
    # A running kernel reaches the API over Kaggle's own network: the inside port (links.py).
    assert called == {"url": emulator.state.inside_url, "status": "RUNNING"}
    # Called back as alice (her key), not as the session's own token.
    assert [c.user for c in emulator.calls("GetKernelSessionStatus")][-1] == "alice"
    assert emulator.callers == {"alice"}


def test_only_the_owners_attached_secrets_are_granted() -> None:
    store = UserSecrets()
    store.set("alice", "A", "value-a")
    store.set("alice", "B", "value-b")
    store.set("bob", "A", "value-bob-a")
    store.attach("alice/k", "A")
    store.attach("bob/k", "B")
    assert "value" not in repr(store)
    assert store.for_kernel("alice/k") == {"A": "value-a"}
    assert store.for_kernel("bob/k") == {}  # bob has no B
    assert store.for_kernel("alice/unattached") == {}
    store.detach("alice/k", "A")
    assert store.for_kernel("alice/k") == {}
    with pytest.raises(ValueError, match="owner/slug"):
        store.attach("no-slug", "A")
    with pytest.raises(ValueError, match="non-empty"):
        store.set("alice", "", "x")


def test_options_preload_secrets_and_keep_values_out_of_repr(tmp_path: Path) -> None:
    options = EmulatorOptions(
        user_secrets={"alice": {"KEY": "preloaded-value"}},
        attached_secrets={"alice/k": ["KEY"]},
    )
    assert "preloaded-value" not in repr(options)
    state = EmulatorState(tmp_path, options, SupervisedRunner(sys.executable, tmp_path, 0.1))
    assert state.secrets.for_kernel("alice/k") == {"KEY": "preloaded-value"}
