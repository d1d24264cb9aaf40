"""Run a Python command in a forked child, as a new interpreter would run it, without the start-up.

A session's `python -m worker` spends most of its start importing torch (about 2.3 CPU-s on the
README's machine): a process forked from one that imported torch already skips that, as
PyTorch's own DataLoader workers do. The child starts from the interpreter that preloaded
(`mark_preloaded`) and drops every module imported after that, so the command imports Baton's and
the user's code afresh, from its own `PYTHONPATH`, in its own directory and environment, with its
own standard streams, as `subprocess.Popen(command, ...)` would have it. Only the command
shapes `python -m MODULE ...`, `python -c CODE ...` and `python SCRIPT ...` of this very interpreter
are run so (`can_fork`); anything else is executed as before.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import os
import runpy
import select
import signal
import site
import subprocess
import sys
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import setproctitle

# What the preloading interpreter had imported, or None where nothing was preloaded (a cold start).
_preloaded: frozenset[str] | None = None
# Its sys.path without its own first entry and its own PYTHONPATH, and its import hooks: what
# every command starts from.
_base_path: list[str] = []
_base_meta_path: list[Any] = []


def mark_preloaded() -> None:
    """Record this interpreter's modules as the ones every forked command starts with."""
    global _preloaded, _base_path, _base_meta_path
    _preloaded = frozenset(sys.modules)
    own = set(_python_path(os.environ))
    _base_path = [entry for entry in sys.path[1:] if entry not in own]
    _base_meta_path = list(sys.meta_path)
    # setproctitle finds the memory it may write a title into on its first call, which needs
    # this interpreter's own environment, before a child replaces it.
    setproctitle.setproctitle(setproctitle.getproctitle())


def set_title(command: Sequence[str]) -> None:
    """Show `command` as this process's command line (ps, top, psutil), as an exec would."""
    setproctitle.setproctitle(" ".join(command))


def can_fork(command: Sequence[str]) -> bool:
    """Whether `command` runs this interpreter in a shape a fork can stand in for."""
    if _preloaded is None or len(command) < 2:
        return False
    if os.path.abspath(command[0]) != sys.executable:
        return False
    if command[1] in ("-m", "-c"):
        return len(command) >= 3
    return not command[1].startswith("-")  # a script


class ForkedProcess:
    """The forked command, waited on as a `subprocess.Popen` would be."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            readable, _, _ = select.select([self._pidfd], [], [], timeout)
            if not readable:
                raise subprocess.TimeoutExpired(["(forked)"], timeout or 0.0)
        code = self.poll()
        assert code is not None  # the pidfd is readable once the process has ended
        return code


def fork_command(
    command: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    stdout_fd: int,
    preexec_fn: Callable[[], None] | None = None,
    *,
    new_session: bool = True,
) -> ForkedProcess:
    """Start `command` (`can_fork` must hold), its stdin from /dev/null and its stdout and stderr
    into `stdout_fd`, as `Popen(..., start_new_session=new_session, preexec_fn=...)` would."""

    # Closed by the child once it is in its session: as Popen returns only after the exec, so
    # a signal to the new process group right after this call reaches the command.
    started, starting = os.pipe()

    def command_in_child() -> int:
        os.close(started)
        if new_session:
            os.setsid()
        _reset_signal_handlers()
        if preexec_fn is not None:
            preexec_fn()
        take_over(cwd, env, stdout_fd, unbuffered=bool(env.get("PYTHONUNBUFFERED")))
        set_title(command)
        sys.orig_argv = list(command)
        os.close(starting)
        return _run(list(command[1:]))

    try:
        pid = fork_running(command_in_child)
    finally:
        os.close(starting)
    try:
        os.read(started, 1)  # end of file: the child closed its end, or died
    finally:
        os.close(started)
    return ForkedProcess(pid)


def fork_running(child: Callable[[], int]) -> int:
    """Fork, and in the child run `child` and exit with what it returns; the child's pid."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        code = child()
    except BaseException:  # everything ends here: the child must never return into its parent
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def take_over(cwd: str, env: Mapping[str, str], stdout_fd: int, *, unbuffered: bool) -> None:
    """In a forked child: the directory, environment and standard streams (stdin /dev/null,
    stdout and stderr into `stdout_fd`) an executed program would start with."""
    _take_streams(stdout_fd, unbuffered=unbuffered)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)


def _reset_signal_handlers() -> None:
    """What exec does to handlers: those the parent's Python code set are back to the default."""
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if callable(signal.getsignal(signum)) and signum != signal.SIGINT:
                signal.signal(signum, signal.SIG_DFL)


def _take_streams(stdout_fd: int, *, unbuffered: bool) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(stdout_fd, 1)
    os.dup2(stdout_fd, 2)
    # As a new interpreter opens them: stdout buffered unless PYTHONUNBUFFERED, stderr by line.
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), write_through=unbuffered, line_buffering=False
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        errors="backslashreplace",
        write_through=unbuffered,
        line_buffering=True,
    )


def _python_path(env: Mapping[str, str]) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _start_afresh(first_path_entry: str) -> None:
    """Forget what was imported after the preload, and look for modules where a new interpreter
    started here with this environment would."""
    assert _preloaded is not None
    for name in set(sys.modules) - _preloaded:
        del sys.modules[name]
    sys.path[:] = [*_python_path(os.environ), *_base_path]
    sys.meta_path[:] = _base_meta_path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    atexit._clear()  # the preloading interpreter's handlers are not this program's
    site.execsitecustomize()  # a `sitecustomize` on this PYTHONPATH, as at a start-up
    # The script's directory (or the working one) goes first only after start-up, as it does.
    sys.path.insert(0, first_path_entry)


def _run(args: list[str]) -> int:
    """Run `python ARGS` in this process; its exit code."""
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            _start_afresh(os.getcwd())
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            _start_afresh("")
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = args
            _start_afresh(os.path.dirname(os.path.abspath(args[0])))
            runpy.run_path(args[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # as the interpreter's top level: the traceback, exit code 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code


def _exit_code(value: object) -> int:
    """What a new interpreter exits with for `sys.exit(value)`."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1
