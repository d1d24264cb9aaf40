"""`baton token NAME` on the server's machine: it finds the live server's database (or refuses in
one line), never makes a second one, and never rotates the admin's token as a side effect.
`token revoke` never echoes a token given in place of an id; a weak admin token stops serve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from orchestrator.cli import main
from tests.factories import ADMIN_TOKEN, auth, make_settings
from tests.support.ports import free_port
from tests.support.serve import baton_serve

BATON = str(Path(sys.executable).parent / "baton")


def _shell(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A shell on the server's machine with no BATON_* settings and a home of its own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("BATON_")}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        **extra,
    )
    return env


def _token(env: dict[str, str], name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "token", name], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_baton_token_against_a_running_server_leaves_its_admin_token_valid(
    tmp_path: Path, database_url: str
) -> None:
    # SQLite in the server's data dir (the default), or PostgreSQL named in the shell too.
    sqlite = database_url.startswith("sqlite")
    settings = make_settings(tmp_path / "data", database_url=None if sqlite else database_url)
    database = {} if sqlite else {"BATON_DATABASE_URL": database_url}
    # The server was started with BATON_ADMIN_TOKEN, so there is no admin token file.
    log = tmp_path / "serve.log"
    with baton_serve(settings, log, XDG_STATE_HOME=str(tmp_path / "state")) as (url, _):
        # Without BATON_DATA_DIR: the live server's data dir is found.
        found = _token(_shell(tmp_path, **database), "alice")
        # With it, and still without BATON_ADMIN_TOKEN (what once replaced the admin's token).
        named = _token(_shell(tmp_path, BATON_DATA_DIR=str(settings.data_dir), **database), "bob")
        assert found.returncode == 0, found.stderr
        assert named.returncode == 0, named.stderr
        for token in (ADMIN_TOKEN, found.stdout.strip(), named.stdout.strip()):
            assert httpx.get(f"{url}/api/v1/jobs", headers=auth(token)).status_code == 200
    assert not (tmp_path / "xdg-data" / "baton").exists()  # no second database
    assert not (settings.data_dir / "admin-token").exists()


def test_baton_token_with_no_server_and_no_data_dir_refuses_in_one_line(tmp_path: Path) -> None:
    ran = _token(_shell(tmp_path), "alice")
    assert ran.returncode == 1
    [line] = ran.stderr.strip().splitlines()
    assert line.startswith("no Baton database in ")
    assert "BATON_DATA_DIR" in line
    assert not (tmp_path / "xdg-data" / "baton" / "baton.db").exists()


def test_the_no_token_hint_names_no_path(tmp_path: Path) -> None:
    ran = subprocess.run(
        [BATON, "jobs"],
        env=_shell(tmp_path, BATON_URL=f"http://127.0.0.1:{free_port()}"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 1
    assert ran.stderr.startswith("no API token: set BATON_TOKEN")
    assert "/" not in ran.stderr.split("(")[0]  # no made-up token file path


def test_revoking_by_the_token_itself_never_echoes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "bt_Zx9v-secret-value-that-must-not-show-0123"
    monkeypatch.setenv("BATON_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("BATON_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SystemExit) as exit_:
        main(["token", "revoke", secret])
    captured = capsys.readouterr()
    assert "not the token" in str(exit_.value.code)
    for text in (str(exit_.value.code), captured.out, captured.err):
        assert secret not in text


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("bt_fourteen-ch", "has 14 characters"),
        ("a" * 40, "too few characters"),
        ("abababababababababababababababababababab", "too few characters"),
    ],
)
def test_a_weak_admin_token_stops_serve_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str, says: str
) -> None:
    monkeypatch.setenv("BATON_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BATON_ADMIN_TOKEN", token)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", str(free_port())])
    message = str(exit_.value.code)
    assert says in message
    assert token not in message
    assert "\n" not in message
