"""`baton pause`, `resume` and `cancel` do what they say, `jobs` and `show` print what the server
holds, and an action the lifecycle forbids is one clear line. Against a server without its
reconcile loop, so every state below is the action's doing alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config import Settings
from tests.factories import job_spec, live_server
from tests.support.marks import starts_processes


@pytest.fixture
@starts_processes
def idle_server(cli_env: Settings) -> Iterator[str]:
    with live_server(cli_env, embedded_loop=False) as url:
        yield url


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(list(argv)) == 0
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _error(*argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    message = exit_.value.code
    assert isinstance(message, str), message
    assert "\n" not in message
    return message


def test_pause_resume_and_cancel_move_the_job_and_a_forbidden_action_is_one_line(
    idle_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(job_spec(name="cli-actions")))
    url = ("--url", idle_server)
    job_id = str(_json(capsys, *url, "submit", str(spec), "--json")["id"])

    assert _json(capsys, *url, "pause", job_id, "--json")["state"] == "paused"
    listing = _text(capsys, *url, "jobs")
    assert job_id in listing
    assert "paused" in listing
    assert _json(capsys, *url, "resume", job_id, "--json")["state"] == "queued"
    shown = _text(capsys, *url, "show", job_id)
    assert job_id in shown
    assert "queued" in shown
    assert _json(capsys, *url, "cancel", job_id, "--yes", "--json")["state"] == "cancelled"
    assert _json(capsys, *url, "show", job_id, "--json")["job"]["state"] == "cancelled"  # type: ignore[index]

    for action in ("resume", "pause", "cancel"):
        assert "job is cancelled" in _error(*url, action, job_id), action
    assert _error(*url, "logs", job_id) == f"job {job_id} has no segments yet"
    assert _error(*url, "resume", "jnope") == "job jnope not found"
