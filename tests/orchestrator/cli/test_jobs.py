"""The `baton` CLI against a live server: submit, watch, download; clear errors; --json."""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.cli import main
from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN, job_spec, live_server, wait_finished
from tests.support.marks import starts_processes
from tests.support.ports import free_port


@pytest.fixture
@starts_processes
def server(cli_env: Settings) -> Iterator[str]:
    with live_server(cli_env) as url:
        yield url


def _spec_file(tmp_path: Path, **overrides: Any) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(job_spec(**overrides)))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _error(*argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    message = exit_.value.code
    assert isinstance(message, str), message  # a message means exit status 1
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_submit_watch_to_the_end_then_download_and_verify(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, total_steps=40, config={"log_every": 5})
    code, out, _ = _run(capsys, "--url", server, "submit", str(spec), "--json")
    assert code == 0
    job_id = json.loads(out)["id"]
    code, out, _ = _run(capsys, "--url", server, "watch", job_id, "--interval", "0.2")
    assert code == 0
    assert "succeeded" in out

    code, out, _ = _run(capsys, "--url", server, "logs", job_id)  # the latest segment's log
    assert "stopping at step 40" in out
    code, out, _ = _run(capsys, "--url", server, "checkpoints", job_id, "--json")
    checkpoints = json.loads(out)
    assert checkpoints[-1]["step"] == 40
    target = tmp_path / "download"
    assert _run(capsys, "--url", server, "download", job_id, "-o", str(target))[0] == 0
    manifest = checkpoints[-1]["manifest"]
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((target / name).read_bytes()).hexdigest() == entry["sha256"]
    assert json.loads((target / "manifest.json").read_text()) == manifest

    # A download cut short resumes with a Range request and still verifies.
    name, entry = next(iter(manifest["files"].items()))
    data = (target / name).read_bytes()
    (target / name).write_bytes(data[: len(data) // 2])
    assert _run(capsys, "--url", server, "download", job_id, "-o", str(target))[0] == 0
    assert (target / name).read_bytes() == data
    # A corrupt partial file is caught by the hash, removed, and the run fails clearly.
    (target / name).write_bytes(b"x" * (entry["bytes"] // 2))
    assert "does not match the manifest" in _error(
        "--url", server, "download", job_id, "-o", str(target)
    )
    assert not (target / name).exists()


def test_listings_print_json_that_parses(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, config={"step_sleep": 0.05})
    _, out, _ = _run(capsys, "--url", server, "submit", str(spec), "--json")
    job_id = json.loads(out)["id"]
    _run(capsys, "--url", server, "pause", job_id)
    _, out, _ = _run(capsys, "--url", server, "jobs", "--json")
    listing = json.loads(out)
    assert [item["id"] for item in listing["items"]] == [job_id]
    _, out, _ = _run(capsys, "--url", server, "show", job_id, "--json")
    shown = json.loads(out)
    assert shown["job"]["id"] == job_id
    assert isinstance(shown["segments"], list)
    _, out, _ = _run(capsys, "--url", server, "checkpoints", job_id, "--json")
    assert isinstance(json.loads(out), list)
    _run(capsys, "--url", server, "cancel", job_id, "--yes")
    _, out, _ = _run(capsys, "--url", server, "jobs", "--state", "cancelled", "--json")
    assert json.loads(out)["total"] == 1


def test_jobs_pages_with_the_cursor_it_prints(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, config={"step_sleep": 0.05})
    ids = [
        json.loads(_run(capsys, "--url", server, "submit", str(spec), "--json")[1])["id"]
        for _ in range(2)
    ]
    for job_id in ids:
        _run(capsys, "--url", server, "pause", job_id)
    _, out, _ = _run(capsys, "--url", server, "jobs", "--limit", "1")
    assert ids[1] in out
    cursor = out.split("--cursor ")[1].split()[0]
    _, out, _ = _run(capsys, "--url", server, "jobs", "--limit", "1", "--cursor", cursor, "--json")
    assert [item["id"] for item in json.loads(out)["items"]] == [ids[0]]


def test_server_down_is_one_clear_line(cli_env: Settings) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    message = _error("--url", closed, "jobs")
    assert message.startswith(f"cannot reach the Baton server at {closed}")


def test_wrong_token_is_one_clear_line(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_TOKEN", "bt_wrong")
    assert "rejected the API token" in _error("--url", server, "jobs")


def test_unknown_job_is_one_clear_line(server: str) -> None:
    for command in ("show", "watch", "cancel", "checkpoints", "download"):
        assert _error("--url", server, command, "jnope") == "job jnope not found"


def test_a_malformed_or_invalid_spec_is_one_clear_line(server: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert "is malformed" in _error("--url", server, "submit", str(broken))
    invalid = _spec_file(tmp_path, total_steps=-3)
    assert _error("--url", server, "submit", str(invalid)).startswith("rejected: total_steps")
    assert "cannot read the spec" in _error("--url", server, "submit", str(tmp_path / "nope"))


def test_config_file_gives_url_and_token_and_the_environment_wins(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BATON_TOKEN")
    monkeypatch.setattr("sys.stdin", io.StringIO(ADMIN_TOKEN + "\n"))
    assert _run(capsys, "config", "set", "token")[0] == 0
    assert _run(capsys, "config", "set", "url", server)[0] == 0
    _, out, _ = _run(capsys, "config", "show")
    assert ADMIN_TOKEN not in out
    _, out, _ = _run(capsys, "jobs", "--json")
    assert json.loads(out)["total"] == 0
    monkeypatch.setenv("BATON_TOKEN", "bt_wrong")
    assert "rejected the API token" in _error("jobs")


def test_range_requests_on_checkpoint_files(server: str, tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=server, headers=headers) as http:
        job = http.post("/api/v1/jobs", json=job_spec(total_steps=10)).json()
        assert wait_finished(http, job["id"])["state"] == "succeeded"  # type: ignore[arg-type]
        checkpoint = http.get(f"/api/v1/jobs/{job['id']}/checkpoints").json()[-1]
        name, entry = next(iter(checkpoint["manifest"]["files"].items()))
        url = f"/api/v1/jobs/{job['id']}/checkpoints/{checkpoint['step']}/files/{name}"
        whole = http.get(url)
        assert whole.status_code == 200
        assert hashlib.sha256(whole.content).hexdigest() == entry["sha256"]
        assert whole.headers["x-checkpoint-sha256"] == entry["sha256"]
        part = http.get(url, headers={"Range": "bytes=10-19"})
        assert part.status_code == 206
        assert part.content == whole.content[10:20]
        bad = http.get(url, headers={"Range": f"bytes={entry['bytes'] + 5}-"})
        assert bad.status_code == 416
        prefix = f"/api/v1/jobs/{job['id']}/checkpoints/{checkpoint['step']}/files"
        assert http.get(f"{prefix}/..%2F..%2Fbaton.db").status_code == 404
        assert http.get(f"{prefix}/not-listed").status_code == 404


def test_token_list_and_revoke(
    server: str,
    cli_env: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "token", "alice")  # today's form: create user alice, print a token
    alice = out.strip()
    assert code == 0
    assert alice.startswith("bt_")
    monkeypatch.setenv("BATON_TOKEN", alice)
    _, out, _ = _run(capsys, "--url", server, "token", "list", "--json")
    tokens = json.loads(out)
    assert [token["current"] for token in tokens] == [True]
    assert alice not in out
    assert _run(capsys, "--url", server, "token", "revoke", tokens[0]["id"])[0] == 0
    assert "rejected the API token" in _error("--url", server, "jobs")


def test_token_create_with_expiry_through_the_api_and_on_the_server(
    server: str,
    cli_env: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "token", "create", "bob", "--expires", "30d")  # server's machine
    assert code == 0
    monkeypatch.setenv("BATON_TOKEN", out.strip())
    # No user: a token for yourself through POST /api/v1/tokens; it expires in a few seconds.
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    code, out, _ = _run(
        capsys, "--url", server, "token", "create", "--label", "ci", "--expires", soon
    )
    assert code == 0
    short_lived = out.strip()
    _, out, _ = _run(capsys, "--url", server, "token", "list", "--json")
    expiry = {
        token["name"]: datetime.fromisoformat(token["expires_at"]) for token in json.loads(out)
    }
    assert expiry["cli"] - datetime.now(UTC) == pytest.approx(
        timedelta(days=30), abs=timedelta(minutes=1)
    )
    assert expiry["ci"] == pytest.approx(datetime.fromisoformat(soon), abs=timedelta(seconds=1))

    monkeypatch.setenv("BATON_TOKEN", short_lived)
    assert _run(capsys, "--url", server, "jobs", "--json")[0] == 0
    time.sleep(max(0.0, (datetime.fromisoformat(soon) - datetime.now(UTC)).total_seconds()) + 0.1)
    assert "rejected the API token" in _error("--url", server, "jobs")


@pytest.mark.parametrize(
    ("expires", "says"),
    [
        ("soon", "give a duration"),
        ("2030-01-01T00:00:00", "add the UTC offset"),
        ("2000-01-01T00:00:00Z", "must be in the future"),
        ("5000w", "more than 10 years away"),
    ],
)
def test_a_bad_expiry_is_one_clear_line(cli_env: Settings, expires: str, says: str) -> None:
    assert says in _error("token", "create", "--expires", expires)


def test_compare_prints_one_metric_of_two_jobs_side_by_side(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = []
    for lr in (0.05, 0.01):
        spec = _spec_file(tmp_path, total_steps=30, config={"log_every": 1, "lr": lr})
        _, out, _ = _run(capsys, "--url", server, "submit", str(spec), "--json")
        ids.append(json.loads(out)["id"])
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=server, headers=headers) as http:
        for job_id in ids:
            assert wait_finished(http, job_id)["state"] == "succeeded"  # type: ignore[arg-type]
    code, out, _ = _run(capsys, "--url", server, "compare", *ids, "--metric", "lr", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [row["step"] for row in rows] == list(range(1, 31))
    assert all(row[ids[0]] > row[ids[1]] for row in rows)  # the first job's rate is higher
    code, out, _ = _run(capsys, "--url", server, "compare", *ids)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].strip() == "loss"
    assert ids[0] in lines[1]
    assert ids[1] in lines[1]
    assert len(lines) == 2 + 20  # at most 20 steps, the first and the last among them
    assert lines[2].split()[0] == "1"
    assert lines[-1].split()[0] == "30"
    assert "'eval_loss'" in _error("--url", server, "compare", *ids, "--metric", "eval_loss")
