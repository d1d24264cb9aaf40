import json
import os
import subprocess
import sys
import time

import psutil

from worker.proctime import IMPORT_TIME, process_start_time


def fake_proc(tmp_path, stat: str, uptime: str):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(stat)
    (tmp_path / "uptime").write_text(uptime)
    return tmp_path


def test_this_process_start_is_the_one_the_kernel_recorded():
    # psutil reads the same kernel record its own way (boot time from /proc/stat, whole seconds).
    kernel_says = psutil.Process().create_time()
    assert abs(process_start_time() - kernel_says) < 1.5


def test_time_spent_before_the_import_counts_against_the_session():
    """A process that idles 3 s before importing the worker still starts its clock at its start,
    not at the import (the fallback would lose those 3 s of the session)."""
    code = (
        "import time; time.sleep(3); "
        "from worker.proctime import IMPORT_TIME, process_start_time; "
        "print(IMPORT_TIME - process_start_time())"
    )
    before_import = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert float(before_import.stdout) >= 3.0


def test_command_names_with_spaces_and_parentheses_parse(tmp_path):
    ticks = 1000 * os.sysconf("SC_CLK_TCK")  # field 22, starttime: 1000 s after boot
    fields = ["S", *["0"] * 18, str(ticks), *["0"] * 30]
    stat = "123 (py (worker) x) " + " ".join(fields)
    uptime = f"{1000 + (time.time() - IMPORT_TIME) + 5:.2f} 0.0"
    started = process_start_time(fake_proc(tmp_path, stat, uptime))
    assert abs(started - (IMPORT_TIME - 5)) < 0.1


def test_unreadable_proc_falls_back_to_import_time(tmp_path):
    assert process_start_time(tmp_path) == IMPORT_TIME
    assert process_start_time(fake_proc(tmp_path, "garbage", "1.0")) == IMPORT_TIME


def test_the_origin_is_this_process_own_start_whatever_its_session_leader():
    """The deadline's origin is the kernel's record of this very process's start: not the import
    (3 s later here), not its parent's or its session leader's start (3 s earlier). The leader
    is made here, a few seconds old, so the outcome never depends on how old the session leader
    of the test run is (a leader older than the plausibility bound would hide a wrong origin
    behind the import-time fallback)."""
    measure = (
        "import json, time; import psutil; time.sleep(3); "
        "from worker.proctime import IMPORT_TIME, process_start_time; "
        "print(json.dumps([process_start_time(), psutil.Process().create_time(), IMPORT_TIME]))"
    )
    leader = (
        "import subprocess, sys, time; time.sleep(3); "
        f"subprocess.run([sys.executable, '-c', {measure!r}], check=True)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", leader],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        start_new_session=True,  # the leader is the parent, started 3 s before the process
    )
    started, kernel_says, imported = json.loads(ran.stdout)
    assert abs(started - kernel_says) < 1.5
    assert imported - started >= 3.0
