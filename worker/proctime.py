"""When this process started, as the kernel recorded it: the origin of the session deadline."""

from __future__ import annotations

import os
import time
from pathlib import Path

# The earliest moment Python code can observe, used where /proc is unavailable.
IMPORT_TIME = time.time()
# A reading older than this before import is implausible for `python -m worker`.
MAX_PLAUSIBLE_AGE = 3600.0


def seconds_after_boot(pid: int | str = "self", proc: Path = Path("/proc")) -> float:
    """When a process started, in seconds after boot: the kernel's own record, which no change
    of the wall clock moves (psutil's `create_time` adds /proc/stat's `btime`, which follows the
    wall clock in whole seconds, so two processes can read one start a second apart). Raises
    OSError when there is no such process, ValueError or IndexError when its record is garbled."""
    stat = (proc / str(pid) / "stat").read_text()
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, "starttime", in clock ticks


def process_start_time(proc: Path = Path("/proc"), pid: str = "self") -> float:
    """Epoch seconds of a process's start (this one's by default); falls back to when this
    module was imported."""
    try:
        started_after_boot = seconds_after_boot(pid, proc)
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return IMPORT_TIME
    started = time.time() - (uptime - started_after_boot)
    if not IMPORT_TIME - MAX_PLAUSIBLE_AGE <= started <= IMPORT_TIME:
        return IMPORT_TIME
    return started
