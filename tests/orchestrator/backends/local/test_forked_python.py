"""A session's Python command forked from the warm host runs as a new interpreter would run it."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.local.sessions import (
    cancel_session,
    start_session,
)
from orchestrator.backends.local.supervisor import SessionExit, SessionPlan
from orchestrator.backends.local.warm import WarmHost
from tests.support.supervisors import session_end
from worker.boundary.paths import SessionPaths

# What the command saw of its process, written where it ran.
_PROBE = """\
import json, os, sys
print("out of the probe")
report = {
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "name": __name__,
    "path_head": sys.path[:2],
    "env": sorted(key for key in os.environ if key.startswith("PROBE_") or key == "LEAK_ME"),
    "stdin": sys.stdin.read(),
    "torch_preloaded": "torch" in sys.modules,
    "supervisor_loaded": "orchestrator.backends.local.supervisor" in sys.modules,
    "customized": "sitecustomize" in sys.modules and sys.modules["sitecustomize"].MARK,
}
with open("report.json", "w") as f:
    json.dump(report, f)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def host() -> Iterator[WarmHost]:
    host = WarmHost()
    yield host
    host.close()


def _run(root: Path, host: WarmHost, command: list[str], env: dict[str, str]) -> SessionExit:
    SessionPaths(root).working.mkdir(parents=True)
    start_session(root, SessionPlan(command, 60.0, 1.0, env=env, cwd="working"), host)
    return session_end(root)


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A PYTHONPATH entry with the probe module and a sitecustomize of its own."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(_PROBE)
    (code / "sitecustomize.py").write_text("MARK = 'from the session PYTHONPATH'\n")
    return code


@pytest.mark.parametrize("form", ["-m", "-c", "script"])
def test_a_forked_command_sees_only_its_own_directory_environment_and_code(
    tmp_path: Path, host: WarmHost, code: Path, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEAK_ME", "the orchestrator's secret")
    root = tmp_path / "session"
    command = {
        "-m": [sys.executable, "-m", "probe", "one", "two"],
        "-c": [sys.executable, "-c", _PROBE, "one", "two"],
        "script": [sys.executable, str(code / "probe.py"), "one", "two"],
    }[form]
    env = {"PYTHONPATH": str(code), "PROBE_EXIT": "3", "PROBE_ONLY": "here"}

    ended = _run(root, host, command, env)

    assert ended.exit_code == 3
    assert "out of the probe" in SessionPaths(root).log.read_text()
    working = SessionPaths(root).working
    report = json.loads((working / "report.json").read_text())
    assert report["cwd"] == str(working.resolve())
    assert report["argv"][1:] == ["one", "two"]
    assert report["name"] == "__main__"
    first = {"-m": str(working.resolve()), "-c": "", "script": str(code)}[form]
    assert report["path_head"] == [first, str(code)]
    assert report["env"] == ["PROBE_EXIT", "PROBE_ONLY"]  # the orchestrator's own: not passed on
    assert report["stdin"] == ""
    # Forked after torch, and not after anything of Baton's: the supervisor's modules are not
    # in the command's interpreter unless it imports them itself.
    assert report["torch_preloaded"]
    assert not report["supervisor_loaded"]
    assert report["customized"] == "from the session PYTHONPATH"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("raise RuntimeError('boom')", 1),
        ("import sys; sys.exit('a message')", 1),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
        ("import atexit, sys; atexit.register(print, 'at exit'); sys.exit(0)", 0),
    ],
)
def test_a_forked_command_ends_with_the_exit_code_a_new_interpreter_would(
    tmp_path: Path, host: WarmHost, body: str, expected: int
) -> None:
    ended = _run(tmp_path, host, [sys.executable, "-c", body], {})
    assert ended.exit_code == expected
    log = SessionPaths(tmp_path).log.read_text()
    if "RuntimeError" in body:
        assert "RuntimeError: boom" in log
    if "a message" in body:
        assert "a message" in log
    if "atexit" in body:
        assert "at exit" in log


def test_a_command_of_another_program_is_executed_as_before(tmp_path: Path, host: WarmHost) -> None:
    ended = _run(tmp_path, host, ["sh", "-c", "echo from sh; exit 4"], {})
    assert ended.exit_code == 4
    assert "from sh" in SessionPaths(tmp_path).log.read_text()


def test_two_forked_commands_draw_their_own_random_numbers(tmp_path: Path, host: WarmHost) -> None:
    """Unseeded, Python's and NumPy's global generators differ from session to session, as in two
    new interpreters: no session replays the host's draws. (Python's `random` reseeds itself in
    a forked child; `numpy.random`, which no preload imports, seeds itself from the OS.)"""
    code = "import random, numpy; print('drew', random.random(), numpy.random.random())"
    draws = []
    for name in ("one", "two"):
        assert _run(tmp_path / name, host, [sys.executable, "-c", code], {}).exit_code == 0
        log = SessionPaths(tmp_path / name).log.read_text()
        draws.append(next(line for line in log.splitlines() if line.startswith("drew")))
    python_draws = {line.split()[1] for line in draws}
    numpy_draws = {line.split()[2] for line in draws}
    assert len(python_draws) == len(numpy_draws) == 2


def test_a_forked_command_cancelled_as_it_starts_is_killed(tmp_path: Path, host: WarmHost) -> None:
    """A cancel that reaches the supervisor the moment it has forked the command still kills it:
    the fork returns once the command is in its own process group, as Popen returns after the
    exec, so the supervisor's SIGKILL to that group finds it."""
    for index in range(5):
        root = tmp_path / str(index)
        SessionPaths(root).working.mkdir(parents=True)
        plan = SessionPlan([sys.executable, "-c", "import time; time.sleep(300)"], 60.0, 1.0, {})
        start_session(root, plan, host)
        assert cancel_session(root)
        ended = session_end(root, timeout=60)  # far below the command's 300 s
        assert (ended.cancelled, ended.exit_code) == (True, -signal.SIGKILL)
