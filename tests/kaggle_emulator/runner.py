"""Runs a kernel session for real on this machine, through the project's session supervisor.

The session directory is laid out like Kaggle's /kaggle: `input/<slug>/` for every mounted data
source and `working/` as the cwd, where the script runs as `working/__script__.py`. The script
finds that root in `BATON_KAGGLE_ROOT`; kagglesdk reaches the emulator at `BATON_KAGGLE_API_URL`
through the image's sitecustomize. `kaggle_secrets` and the project (`worker`, `trainers`) come
through `PYTHONPATH`, standing in for modules installed in Kaggle's image. The attached secrets'
values go into a 0600 file in the session root, never into the environment, the plan or
`working/`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from orchestrator.backends.local import sessions, warm
from orchestrator.backends.local.supervisor import SessionExit, SessionPlan, SupervisorPid
from tests.kaggle_emulator import packages
from tests.kaggle_emulator.kernel_sessions import KernelSession
from tests.kaggle_emulator.user_secrets import IMAGE_DIR, VALUES_FILE_ENV, write_values
from worker.accelerator import EMULATED_ENV
from worker.boundary.paths import WORKING_DIR

SCRIPT_NAME = "__script__.py"
# The container boots (Kaggle's timer already running), then starts the script as a child; the
# booting process outlives SIGTERM so the supervisor waits for the script's own exit.
# Where the session was forked from a warm host (the local backend's), the script is forked too.
_BOOT = (
    "import os, signal, subprocess, sys, time\n"
    "from orchestrator.backends.local import forked_python\n"
    "time.sleep(float(sys.argv[1]))\n"
    "command = [sys.executable, sys.argv[2]]\n"
    "if forked_python.can_fork(command):\n"
    "    script = forked_python.fork_command(\n"
    "        command, os.getcwd(), dict(os.environ), 1, new_session=False\n"
    "    )\n"
    "else:\n"
    "    script = subprocess.Popen(command)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.exit(script.wait())\n"
)
# Inside a Kaggle session kagglesdk finds the session's own API token through this variable
# (kagglesdk.kaggle_env.get_access_token_from_env) and prefers it to any key it is given.
SESSION_TOKEN_FILE = "kaggle-session-token"


class SessionRunner(Protocol):
    def start(self, session: KernelSession, secrets: Mapping[str, str]) -> None: ...

    def state(self, session: KernelSession) -> sessions.SessionState: ...

    def result(self, session: KernelSession) -> SessionExit | None: ...

    def cancel(self, session: KernelSession) -> bool: ...

    def exited(self, session: KernelSession) -> bool: ...


class SupervisedRunner:
    """The real runner: `orchestrator.backends.local.sessions` with a hard time limit."""

    def __init__(
        self,
        python: str,
        repo_root: Path,
        grace_seconds: float,
        boot_seconds: float = 0.0,
        session_tokens: Mapping[int, str] | None = None,
    ) -> None:
        self._python = python
        self._repo_root = repo_root
        self._grace = grace_seconds
        self._boot = boot_seconds
        # Session id -> the token a session's own KAGGLE_API_V1_TOKEN holds (shared, mutable).
        self._session_tokens = session_tokens

    def start(self, session: KernelSession, secrets: Mapping[str, str]) -> None:
        """Lay out the session and start it; `secrets` are the values it may read."""
        root = session.root
        (root / "input").mkdir(parents=True, exist_ok=True)
        values_file = write_values(root, session.kernel_id, secrets)
        for mount in session.mounts:
            # Hard links: Kaggle mounts inputs read-only, without a copy on the session's disk.
            shutil.copytree(
                mount.source, root / "input" / mount.name, dirs_exist_ok=True, copy_function=_link
            )
        working = root / WORKING_DIR
        working.mkdir(exist_ok=True)
        (working / SCRIPT_NAME).write_text(session.script)
        token_env: dict[str, str] = {}
        if self._session_tokens is not None and session.id in self._session_tokens:
            token_file = root / SESSION_TOKEN_FILE
            token_file.write_text(self._session_tokens[session.id])
            token_file.chmod(0o600)
            token_env = {
                "KAGGLE_API_V1_TOKEN": str(token_file),
                "KAGGLE_DATA_PROXY_URL": session.api_url,
            }
        plan = SessionPlan(
            command=[self._python, "-c", _BOOT, f"{self._boot:g}", SCRIPT_NAME],
            limit_seconds=session.limit_seconds,
            grace_seconds=self._grace,
            env={
                "BATON_KAGGLE_ROOT": str(root),
                "BATON_KAGGLE_API_URL": session.api_url,
                # kagglesdk's own switch; the image's sitecustomize points TEST at api_url.
                "KAGGLE_API_ENVIRONMENT": "TEST",
                VALUES_FILE_ENV: str(values_file),
                "PYTHONPATH": os.pathsep.join([str(IMAGE_DIR), str(self._repo_root)]),
                "PYTHONUNBUFFERED": "1",
                "KAGGLE_KERNEL_RUN_TYPE": "Batch",
                # This host has no Kaggle GPU or TPU: say what the session stands in for.
                EMULATED_ENV: session.machine,
                **_pip_env(root, session.api_url),
                **token_env,
            },
            cwd=WORKING_DIR,
            keep_output_on_timeout=session.cut_keeps_output,
        )
        sessions.start_session(root, plan, warm.shared_host())

    def state(self, session: KernelSession) -> sessions.SessionState:
        return sessions.session_state(session.root)

    def result(self, session: KernelSession) -> SessionExit | None:
        return SessionExit.read(session.root)

    def cancel(self, session: KernelSession) -> bool:
        return sessions.cancel_session(session.root)

    def exited(self, session: KernelSession) -> bool:
        """Whether the session's supervisor has exited; reaps it if it is a zombie.

        `sessions` stops polling a supervisor's Popen once status.json exists, so a finished
        supervisor stays a zombie and its Popen warns "subprocess is still running" when
        collected. `cancel_session` on a zombie only polls (and so reaps) it, sending nothing.
        """
        record = SupervisorPid.read(session.root)
        if record is None:
            return True
        try:
            with open(f"/proc/{record.pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ValueError, IndexError):
            return True
        if state != "Z":
            return False
        sessions.cancel_session(session.root)
        return True


def _pip_env(root: Path, api_url: str) -> dict[str, str]:
    """pip in a session: the emulator's package index instead of PyPI (packages.py; a session
    without internet gets a refusing address, as on Kaggle), no cache (every Kaggle session
    is a fresh container), and installs into the session's own folder, standing for the
    image's site-packages: never into the interpreter the tests run with."""
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{api_url}/{packages.PREFIX}/",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "5",
        "PIP_TARGET": str(root / "site-packages"),
    }


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
