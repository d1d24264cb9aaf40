"""The CLI's traps, closed (issue 20): a bad URL or state is one line that says what is right,
a Kaggle job without credentials names the command that stores them, cancel asks and says what
it keeps, Ctrl-C on a watch detaches, `watch` survives a server restart, `submit` prints the
job's page, and `checkpoints` lists only what `download` can fetch."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner

from orchestrator.api.main import create_app
from orchestrator.cli import main
from orchestrator.cli.app import app
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine.checkpoints import CheckpointStore
from orchestrator.service import build_services, prestart
from tests.factories import (
    ADMIN_TOKEN,
    job_spec,
    kaggle_spec,
    live_server,
    wait_finished,
    wait_for,
)
from tests.support.ports import free_port

STATES = "queued, running, waiting, paused, succeeded, failed, cancelled"


@pytest.fixture
def idle_server(cli_env: Settings) -> Iterator[str]:
    """No reconcile loop: a submitted job stays queued until the test acts on it."""
    with live_server(cli_env, embedded_loop=False) as url:
        yield url


def _error(*argv: str) -> str:
    """The one line a failing command ends with (exit status 1, no traceback, no box)."""
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    message = exit_.value.code
    assert isinstance(message, str), message
    assert "\n" not in message
    return message


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _spec_file(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _api(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})


def test_config_set_url_refuses_what_is_not_a_server_url(cli_env: Settings) -> None:
    for bad in ("notaurl", "ftp://host", "http://", "http://host:port"):
        assert "is not a server URL" in _error("config", "set", "url", bad), bad
    config = Path(os.environ["BATON_CONFIG"])
    assert not config.exists()
    assert main(["config", "set", "url", "https://baton.example:8443/"]) == 0
    assert 'url = "https://baton.example:8443"' in config.read_text()


def test_an_unknown_state_is_one_line_listing_the_states(idle_server: str) -> None:
    message = _error("--url", idle_server, "jobs", "--state", "done")
    assert message == f"--state 'done' is not a job state: use one of {STATES}"


def test_a_kaggle_job_without_credentials_names_the_command_that_stores_them(
    idle_server: str, tmp_path: Path
) -> None:
    spec = _spec_file(tmp_path, kaggle_spec())
    message = _error("--url", idle_server, "submit", str(spec))
    assert "baton kaggle-credentials --username" in message
    with _api(idle_server) as api:
        assert api.get("/api/v1/jobs").json()["total"] == 0


def test_submit_prints_the_jobs_page(
    idle_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _out(capsys, "--url", idle_server, "submit", str(_spec_file(tmp_path, job_spec())))
    [job_id] = [line.split()[0] for line in out.splitlines() if line.startswith("j")]
    assert f"page: {idle_server}/ui/jobs/{job_id}" in out
    with _api(idle_server) as api:
        # The page is the status page's: it asks for a sign-in, and is not a 404.
        page = api.get(f"/ui/jobs/{job_id}", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/ui/signin"


def test_cancel_asks_first_and_says_what_is_kept(
    idle_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, job_spec())
    job_id = json.loads(_out(capsys, "--url", idle_server, "submit", str(spec), "--json"))["id"]
    runner = CliRunner()

    answered_no = runner.invoke(app, ["--url", idle_server, "cancel", job_id], input="n\n")
    assert "A running session is killed" in answered_no.output
    assert "no checkpoint was committed" in answered_no.output
    assert str(answered_no.exception) == f"not cancelled: {job_id} is left as it was"
    no_answer = runner.invoke(app, ["--url", idle_server, "cancel", job_id], input="")
    assert str(no_answer.exception) == "not cancelled: no answer (pass --yes to skip the question)"
    with _api(idle_server) as api:
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "queued"

    answered_yes = runner.invoke(app, ["--url", idle_server, "cancel", job_id], input="y\n")
    assert answered_yes.exit_code == 0, answered_yes.output
    assert "cancelled" in answered_yes.output
    assert "kept: no checkpoint was committed, so no weights are kept" in answered_yes.output


@contextmanager
def _cli(url: str, *argv: str) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """`baton ARGV` in its own process, as a user runs it, with its output (stdout and stderr
    together) read as it comes."""
    env = {"BATON_URL": url, "BATON_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    command = "import sys; from orchestrator.cli import main; sys.exit(main())"
    with _python(command, *argv, env=env) as (process, lines):
        yield process, lines


@contextmanager
def _python(
    command: str, *argv: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """`python -c COMMAND ARGV` with `env` added to ours, its output read as it comes."""
    with subprocess.Popen(
        [sys.executable, "-c", command, *argv],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        lines = Lines(process.stdout)
        try:
            yield process, lines
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            lines.done.wait(timeout=30)


class Lines:
    """A process's output lines as they come, read on a thread."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self.done = threading.Event()
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self.done.set()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} in {self.seen}"
            try:
                self.seen.append(self._queue.get(timeout=left))
            except queue.Empty:
                continue

    def all(self, timeout: float = 30) -> str:
        """Everything the process wrote, once its output has ended."""
        assert self.done.wait(timeout), "the output did not end"
        while not self._queue.empty():
            self.seen.append(self._queue.get())
        return "".join(self.seen)


def test_ctrl_c_on_submit_watch_detaches_and_the_job_goes_on(
    idle_server: str, tmp_path: Path
) -> None:
    spec = _spec_file(tmp_path, job_spec())
    with _cli(idle_server, "submit", str(spec), "--watch") as (process, lines):
        lines.wait_for("page: ")
        page = next(line for line in lines.seen if "page: " in line)
        job_id = page.split("/ui/jobs/")[1].strip()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
        lines.wait_for(f"detached; re-attach with baton watch {job_id}")
    assert not any("Traceback" in line for line in lines.seen), "".join(lines.seen)
    with _api(idle_server) as api:
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "queued"


STALLS_AFTER_CTRL_C = """
import sys, time
import typer
from orchestrator.cli.jobs import detachable

def main() -> None:
    with detachable("job-1"):
        print("watching", flush=True)
        while True:  # a watch that never reaches a pause (a call that hangs)
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass

typer.run(main)
"""


def test_ctrl_c_detaches_even_when_the_watch_stalls_instead_of_unwinding() -> None:
    with _python(STALLS_AFTER_CTRL_C) as (process, lines):
        lines.wait_for("watching")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    assert "detached; re-attach with baton watch job-1" in lines.all()


SWALLOWS_THE_INTERRUPT = """
import time
import typer
from orchestrator.cli.jobs import detachable

def main() -> None:
    with detachable("job-1") as detach:
        try:
            print("watching", flush=True)
            while True:
                try:  # code that cannot let a KeyboardInterrupt out (a C extension's callback)
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    print("swallowed", flush=True)
                detach.pause(0.05)
        finally:
            print("unwound", flush=True)

typer.run(main)
"""


def test_ctrl_c_unwinds_the_watch_even_where_the_interrupt_would_be_swallowed() -> None:
    """The interrupt is raised at the watch's next pause, from Baton's own code, never inside
    whatever the watch was running when Ctrl-C came: the watch unwinds (its progress bar gives
    the terminal back) without waiting for the grace timer."""
    with _python(SWALLOWS_THE_INTERRUPT) as (process, lines):
        lines.wait_for("watching")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    out = lines.all()
    assert "unwound" in out
    assert "swallowed" not in out
    assert "detached; re-attach with baton watch job-1" in out


class Server:
    """The API on a fixed port (bound with SO_REUSEADDR: reusable at once), with no reconcile
    loop unless `engine`, started and stopped like a server that restarts."""

    def __init__(self, settings: Settings, port: int, *, engine: bool = False) -> None:
        self.settings = settings
        self.port = port
        self.engine = engine

    def start(self) -> None:
        self.services = build_services(self.settings, embedded_loop=self.engine)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        app = create_app(self.services)
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )
        self.thread.start()
        _until(lambda: self.server.started or not self.thread.is_alive())
        assert self.thread.is_alive(), "the server did not start"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.listener.close()
        self.services.db.dispose()


def _until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_watch_reconnects_when_the_server_restarts(cli_env: Settings) -> None:
    prestart(cli_env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server(cli_env, port)
    server.start()
    try:
        with _api(url) as api:
            job_id = api.post("/api/v1/jobs", json=job_spec()).json()["id"]
        with _cli(url, "watch", job_id, "--interval", "0.1") as (process, lines):
            lines.wait_for("submitted")  # the job's first event: the watch is under way
            server.stop()
            # The server is down: the watch says so and keeps trying.
            lines.wait_for("reconnecting…")
            assert process.poll() is None
            server.start()
            lines.wait_for("reconnected")
            with _api(url) as api:
                assert api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
            assert process.wait(timeout=60) == 1  # the job ended cancelled
            lines.wait_for("cancelled")
    finally:
        if server.thread.is_alive():
            server.stop()
    assert not any("Traceback" in line for line in lines.seen)


def test_logs_follow_prints_every_line_once_across_sessions_and_a_restart(
    cli_env: Settings, tmp_path: Path
) -> None:
    prestart(cli_env)
    url = f"http://127.0.0.1:{free_port()}"
    server = Server(cli_env, int(url.rsplit(":", 1)[1]), engine=True)
    server.start()
    # Three sessions of 30 steps, cut by step count (not time), each step's line logged.
    spec = job_spec(
        total_steps=90, config={"step_sleep": 0.03, "stop_every_steps": 30, "log_every": 1}
    )
    told = tmp_path / "stderr.txt"
    env = {**os.environ, "BATON_URL": url, "BATON_TOKEN": ADMIN_TOKEN}
    command = "import sys; from orchestrator.cli import main; sys.exit(main())"
    try:
        with _api(url) as api:
            job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
            wait_for(api, job_id, lambda job: bool(job["progress"]), 120)  # type: ignore[arg-type]
        with (
            told.open("w") as stderr,
            subprocess.Popen(
                [sys.executable, "-c", command, "logs", job_id, "0", "-f", "--interval", "0.1"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            ) as process,
        ):
            assert process.stdout is not None
            lines = Lines(process.stdout)
            lines.wait_for("step 40/90")  # inside the second session
            server.stop()
            _until(lambda: "reconnecting" in told.read_text(), 120)
            server.start()
            assert process.wait(timeout=300) == 0
            printed = lines.all()
        with _api(url) as api:
            assert wait_finished(api, job_id)["state"] == "succeeded"  # type: ignore[index]
            segments = api.get(f"/api/v1/jobs/{job_id}/segments").json()
            whole = "".join(
                api.get(
                    f"/api/v1/jobs/{job_id}/segments/{s['index']}/log", params={"tail": 10**6}
                ).text
                for s in segments
            )
    finally:
        if server.thread.is_alive():
            server.stop()
    assert len(segments) >= 3
    assert printed == whole  # every line of every session, once, in order
    for step in range(1, 91):
        assert printed.count(f" step {step}/90 ") == 1, step
    assert "resumed from step 30" in printed
    assert "reconnected" in told.read_text()
    assert "── session 2 (from step " in told.read_text()


def test_checkpoints_lists_only_what_download_can_fetch(
    cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, job_spec(total_steps=20))
    with live_server(cli_env) as url, _api(url) as api:
        job_id = json.loads(_out(capsys, "--url", url, "submit", str(spec), "--json"))["id"]
        assert wait_finished(api, job_id)["state"] == "succeeded"  # type: ignore[arg-type]
        shown = _out(capsys, "--url", url, "show", job_id)
        [header] = [line for line in shown.splitlines() if line.split()[:1] == ["seg"]]
        assert "load s" in header
        [kept] = json.loads(_out(capsys, "--url", url, "checkpoints", job_id, "--json"))
        assert kept["step"] == 20
        # The summary: quota per phase with the share trained, last metrics, the digest.
        assert "quota used: " in shown
        assert "% of session time trained" in shown
        assert "last metrics at step 20: loss " in shown
        assert f"model digest {kept['model_digest']} (step 20)" in shown
        assert "took 0:" in shown

        # The store prunes the files of all but the newest `keep` checkpoints; with keep=0, all.
        db = Database(cli_env.resolved_database_url)
        try:
            CheckpointStore(db, cli_env.checkpoints_dir, keep=0).prune(job_id)
        finally:
            db.dispose()
        # The listing still names it, as pruned; a download finds nothing to fetch.
        [pruned] = json.loads(_out(capsys, "--url", url, "checkpoints", job_id, "--json"))
        assert (pruned["step"], pruned["kept"]) == (20, False)
        assert _error("--url", url, "download", job_id) == f"job {job_id} has no checkpoint"
        gone = api.get(f"/api/v1/jobs/{job_id}/checkpoints/20/files/manifest.json")
        assert gone.status_code == 410


def test_cancel_names_the_checkpoints_it_keeps(
    cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, job_spec(total_steps=100_000, config={"step_sleep": 0.01}))
    with live_server(cli_env) as url, _api(url) as api:
        job_id = json.loads(_out(capsys, "--url", url, "submit", str(spec), "--json"))["id"]
        wait_for(api, job_id, lambda job: (job["progress"] or {}).get("step", 0) > 0, 120)  # type: ignore[arg-type]
        _out(capsys, "--url", url, "pause", job_id)  # the session commits, then the job pauses
        wait_for(api, job_id, lambda job: job["state"] == "paused", 120)  # type: ignore[arg-type]
        [checkpoint] = api.get(f"/api/v1/jobs/{job_id}/checkpoints").json()

        out = _out(capsys, "--url", url, "cancel", job_id, "--yes")
        assert (
            f"kept: its 1 kept checkpoint(s), up to step {checkpoint['step']}, stay downloadable "
            f"(baton download {job_id})"
        ) in " ".join(out.split())
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "cancelled"
        assert len(api.get(f"/api/v1/jobs/{job_id}/checkpoints").json()) == 1


@pytest.mark.parametrize(
    ("kaggle", "heard"),
    [
        ({"enable_internet": True, "control_poll_seconds": 60}, "hears the cancel"),
        ({}, "cannot hear the cancel (kaggle.enable_internet is off)"),
    ],
)
def test_cancelling_a_kaggle_job_says_whether_its_session_can_hear_it(
    idle_server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kaggle: dict[str, Any],
    heard: str,
) -> None:
    with _api(idle_server) as api:
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
    spec = _spec_file(tmp_path, kaggle_spec(kaggle))
    job_id = json.loads(_out(capsys, "--url", idle_server, "submit", str(spec), "--json"))["id"]
    out = _out(capsys, "--url", idle_server, "cancel", job_id, "--yes")
    assert heard in " ".join(out.split())
