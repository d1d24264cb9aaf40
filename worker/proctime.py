"""When this process started, as the kernel recorded it: the origin of the session deadline."""

from __future__ import annotations

import os
import time
from pathlib import Path

# The earliest moment Python code can observe, used where /proc is unavailable.
IMPORT_TIME = time.time()
# A reading older than this before import is implausible for `python -m worker`.
MAX_PLAUSIBLE_AGE = 3600.0


def process_start_time(proc: Path = Path("/proc"), pid: str = "self") -> float:
    """Epoch seconds of a process's start (this one's by default); falls back to when this
    module was imported."""
    try:
        stat = (proc / pid / "stat").read_text()
        # The command name may contain spaces and parentheses; fields resume after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22, "starttime", in clock ticks since boot
        uptime = float((proc / "uptime").read_text().split()[0])
        ticks_per_second = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return IMPORT_TIME
    started = time.time() - (uptime - start_ticks / ticks_per_second)
    if not IMPORT_TIME - MAX_PLAUSIBLE_AGE <= started <= IMPORT_TIME:
        return IMPORT_TIME
    return started
