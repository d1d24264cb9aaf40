"""The batch script of one segment, and the sbatch options it is submitted with (pure).

The script asks Slurm for the allocation's real end time (`scontrol show job`: EndTime; Slurm
22.05 sets no SLURM_JOB_END_TIME) and gives the worker a deadline of that end time less
EXIT_MARGIN_SECONDS, never later than the segment's own limit from the job's start. Queue time
therefore costs nothing.

`--signal` is a backstop only. Slurm sends it early (seen here: the TERM of `--signal=B:TERM@30`
came 24 s into a one-minute allocation), so the script never stops the worker on it: the signal
only arms a graceful stop (the control file's `pause`) at the worker's own deadline, which ends
a step that overran its estimate at the next step boundary instead of at Slurm's kill. A TERM
(scancel, or Slurm's kill at the limit) is passed on to the worker, which commits if it can
within Slurm's KillWait.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence

from orchestrator.spec import SlurmSpec
from worker.boundary.paths import SessionPaths
from worker.control import Command

# The script's own work after the worker exits (one small file); Slurm kills at the end time.
EXIT_MARGIN_SECONDS = 3
# Slurm's warning signal: asked this long before the end (it may come earlier still), at most
# half the allocation.
SIGNAL_LEAD_SECONDS = 60
JOB_NAME_PREFIX = "baton-"


def job_name(launch_id: str) -> str:
    """The Slurm job name of a segment: `find` looks a launch up by it after a crash."""
    return f"{JOB_NAME_PREFIX}{launch_id}"


def walltime_minutes(limit_seconds: float) -> int:
    """`--time` in minutes: the segment's limit rounded up (the worker's deadline is the limit)."""
    return max(1, math.ceil(limit_seconds / 60 - 1e-9))


def signal_lead(limit_seconds: float) -> int:
    """Seconds before the end Slurm is asked to warn: SIGNAL_LEAD_SECONDS, at most half the
    allocation (a lead as long as the allocation would warn at the start)."""
    return min(SIGNAL_LEAD_SECONDS, walltime_minutes(limit_seconds) * 30)


def sbatch_options(launch_id: str, paths: SessionPaths, spec: SlurmSpec, limit: float) -> list[str]:
    options = [
        f"--job-name={job_name(launch_id)}",
        f"--comment={launch_id}",
        f"--time={walltime_minutes(limit)}",
        f"--output={paths.log}",
        f"--chdir={paths.root}",
        f"--signal=B:USR1@{signal_lead(limit)}",
        # Only SLURM_* variables reach the job: never the orchestrator's tokens or keys.
        "--export=NONE",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.cpus}",
    ]
    for flag, value in (
        ("--partition", spec.partition),
        ("--account", spec.account),
        ("--qos", spec.qos),
        ("--gres", spec.gres),
        ("--mem", spec.mem),
    ):
        if value is not None:
            options.append(f"{flag}={value}")
    return [*options, *spec.sbatch_options]


def batch_script(
    paths: SessionPaths,
    *,
    python: str,
    limit_seconds: float,
    env: Mapping[str, str],
    extra_path: Sequence[str] = (),
) -> str:
    """The script sbatch runs: record the start and end time, run the worker, record its exit."""
    q = shlex.quote
    exports = "\n".join(f"export {name}={q(value)}" for name, value in sorted(env.items()))
    search = ":".join([*extra_path, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    return f"""#!/bin/bash
# A Baton segment (orchestrator/backends/slurm/script.py). Slurm runs it in {q(str(paths.root))}.
umask 077
# Traps first: Slurm may send its warning (and scancel its TERM) while the script starts, and
# bash's default for USR1 is to die.
worker=""
signalled=""
backstop_pid=""
trap 'signalled=$(date +%s)' USR1
trap 'if [ -n "$worker" ]; then kill -TERM "$worker" 2>/dev/null; else exit 143; fi' TERM
export PATH={q(search)}
{exports}
started=$(date +%s.%N)
end=$(scontrol show job -o "$SLURM_JOB_ID" | tr ' ' '\\n' | sed -n 's/^EndTime=//p')
end_epoch=$(date -d "$end" +%s 2>/dev/null)
if [ -z "$end_epoch" ]; then
    echo "baton: no end time from scontrol ($end); the deadline counts from the start"
    end_epoch=$(awk -v s="$started" -v l={limit_seconds!r} 'BEGIN {{printf "%d", s + l}}')
fi
# The worker's limit counts from --started-at: its deadline is the earlier of the allocation's
# end (less the script's own exit) and the segment's limit from the job's start.
origin=$(awk -v e="$end_epoch" -v s="$started" -v l={limit_seconds!r} -v m={EXIT_MARGIN_SECONDS} \\
    'BEGIN {{o = e - m - l; if (o > s) o = s; printf "%.3f", o}}')
deadline=$(awk -v o="$origin" -v l={limit_seconds!r} 'BEGIN {{printf "%.3f", o + l}}')
printf '{{"job_id": "%s", "started_at": %s, "end_time": %s, "deadline": %s}}\\n' \\
    "$SLURM_JOB_ID" "$started" "$end_epoch" "$deadline" > {q(str(paths.slurm_started))}.tmp
mv {q(str(paths.slurm_started))}.tmp {q(str(paths.slurm_started))}
echo "baton: Slurm job $SLURM_JOB_ID, allocation ends at $end ($end_epoch)"

backstop() {{
    now=${{signalled:-$(date +%s)}}
    signalled=""
    echo "baton: Slurm's warning signal arrived at $now, $(( end_epoch - now )) s before the end"
    (
        wait_for=$(( ${{deadline%.*}} - $(date +%s) ))
        [ "$wait_for" -gt 0 ] && sleep "$wait_for"
        echo {Command.PAUSE.value} > {q(str(paths.control))}
    ) >/dev/null 2>&1 &
    backstop_pid=$!
}}
trap backstop USR1
# A warning that came before the deadline was known arms the backstop now.
[ -n "$signalled" ] && backstop

{q(python)} -m worker --root {q(str(paths.root))} --started-at "$origin" &
worker=$!
while true; do
    wait "$worker"
    code=$?
    # A trap interrupted the wait (status > 128) while the worker still runs: wait again.
    if [ "$code" -gt 128 ] && kill -0 "$worker" 2>/dev/null; then
        continue
    fi
    break
done
[ -n "$backstop_pid" ] && kill "$backstop_pid" 2>/dev/null
printf '{{"exit_code": %d, "started_at": %s, "ended_at": %s}}\\n' \\
    "$code" "$started" "$(date +%s.%N)" > {q(str(paths.slurm_ended))}.tmp
mv {q(str(paths.slurm_ended))}.tmp {q(str(paths.slurm_ended))}
exit "$code"
"""
