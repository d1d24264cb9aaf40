"""Run mutmut's mutants of a module that also runs detached, as `python -m MODULE`.

mutmut never runs such a mutant: its stats phase sees no test call the detached process, so it
counts the mutant as "no tests". And the process, running as `__main__`, would not switch the
mutant on anyway: mutmut's trampoline acts only where the mutant's module is the function's
`__module__`. So, after `mutmut run` has written `mutants/`, run from there:

    cd mutants && python -m tests.mutation.detached MODULE TEST... [--only GLOB]... [--out FILE]

Each mutant runs alone, in a fork of this warmed-up process (pytest's start-up costs more than
most mutants' tests), with `MUTANT_UNDER_TEST` set and `PYTHONPATH` led by a `sitecustomize`
that renames the mutant `__main__.…` in the process started as `python -m MODULE`, then by
`mutants/` itself. A mutant whose tests outrun `--timeout` counts as a timeout: the fork's
process group and whatever runs under its temp folder are killed. The forced failure first (it
must fail) and the clean run (it must pass), unless `--resume`. Results go to FILE, one
tab-separated line per mutant; mutants already there are skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

# Plugins this process imported before pytest.main cannot be rewritten: not an error here.
PYTEST_ARGS = [
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
]
RENAME_IN_DETACHED = """\
import os, sys
_module, _, _mutant = os.environ.get("MUTANT_UNDER_TEST", "").rpartition(".")
if _module and sys.orig_argv[1:3] == ["-m", _module]:
    os.environ["MUTANT_UNDER_TEST"] = "__main__." + _mutant
"""


def mutant_names(module: str, only: list[str]) -> list[str]:
    """The module's mutants in mutants/MODULE.py.meta, glob by glob (most important first)."""
    meta = Path(*module.split(".")).with_suffix(".py.meta")
    names = json.loads(meta.read_text())["exit_code_by_key"]
    chosen = [n for glob in only for n in names if fnmatch.fnmatchcase(n, f"{module}.{glob}")]
    return list(dict.fromkeys(chosen))


def end_leftovers(basetemp: Path) -> None:
    """Kill whatever a mutant's tests left running under their temp folder (supervisors and
    sessions run in sessions of their own, outside the fork's process group)."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if str(basetemp) in " ".join([process.cwd(), *process.cmdline()]):
                process.kill()


def run_one(name: str, tests: list[str], timeout: float, log: Path) -> tuple[str, float]:
    """(killed, survived or timeout, seconds) of the tests with `name` switched on."""
    started = time.monotonic()
    basetemp = Path(tempfile.mkdtemp(prefix="detached-", dir=os.environ.get("TMPDIR")))
    pid = os.fork()
    if pid == 0:  # the child: its own process group, its output to the log
        os.setpgid(0, 0)
        os.environ["MUTANT_UNDER_TEST"] = name
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os._exit(int(pytest.main([*PYTEST_ARGS, f"--basetemp={basetemp}", *tests])))
    code = None
    while code is None and time.monotonic() < started + timeout:
        time.sleep(0.2)
        done, status = os.waitpid(pid, os.WNOHANG)
        code = os.waitstatus_to_exitcode(status) if done else None
    if code is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    end_leftovers(basetemp)
    shutil.rmtree(basetemp, ignore_errors=True)
    verdict = "timeout" if code is None else "survived" if code == 0 else "killed"
    return verdict, time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module")
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--only", action="append", help="a glob over the name after MODULE.")
    parser.add_argument("--out", type=Path, default=Path("detached-results.tsv"))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--resume", action="store_true", help="skip the two sanity runs.")
    args = parser.parse_args(argv)
    site = Path(tempfile.mkdtemp(prefix="detached-site-"))
    (site / "sitecustomize.py").write_text(RENAME_IN_DETACHED)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.getcwd()])
    # Warm up once, every fork starts from here: plugins, conftest and test modules imported.
    pytest.main([*PYTEST_ARGS, "--collect-only", *args.tests])

    logs = args.out.with_suffix(".logs")
    logs.mkdir(exist_ok=True)
    done = (
        {line.split("\t")[0] for line in args.out.read_text().splitlines()}
        if args.out.exists()
        else set()
    )
    for check, expected in [] if args.resume else [("fail", "killed"), ("none", "survived")]:
        verdict, _ = run_one(check, args.tests, args.timeout, logs / check)
        if verdict != expected:
            raise SystemExit(f"sanity: {check} {verdict}, not {expected}: see {logs / check}")
    with args.out.open("a") as out:
        for name in mutant_names(args.module, args.only or ["*"]):
            if name not in done:
                verdict, seconds = run_one(name, args.tests, args.timeout, logs / name)
                print(f"{name}\t{verdict}\t{seconds:.0f}", file=out, flush=True)
                print(f"{verdict:8} {seconds:5.0f} s  {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
