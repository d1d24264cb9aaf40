"""`baton slurm check`: submit one 30 s probe job and report what a segment will meet.

It reports the partition's limits, how long the probe waited in the queue, the allocation's end
time as the job itself reads it (the worker's clock), when the `--signal` warning really arrived,
and whether the job saw the session directory the submit host wrote (a shared filesystem).
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from orchestrator.backends.base import BackendError
from orchestrator.backends.slurm.commands import ENDED_STATES, SlurmJobs, parse_scontrol_record
from orchestrator.preflight import Outcome, Report
from orchestrator.spec import SlurmSpec

PROBE_SECONDS = 30
# The probe asks for its warning this long before its one-minute end, so that it comes while the
# 30 s probe still runs if Slurm sends it as early as it did here.
PROBE_SIGNAL_LEAD = 50
PROBE_RESULT = "probe.json"
PROBE_TOKEN = "token"


def probe_script(directory: Path) -> str:
    q = shlex.quote
    result = q(str(directory / PROBE_RESULT))
    return f"""#!/bin/bash
started=$(date +%s.%N)
end=$(scontrol show job -o "$SLURM_JOB_ID" | tr ' ' '\\n' | sed -n 's/^EndTime=//p')
signalled=null
trap 'signalled=$(date +%s.%N)' USR1
sleep {PROBE_SECONDS} &
while ! wait $!; do kill -0 $! 2>/dev/null || break; done
token=$(cat {q(str(directory / PROBE_TOKEN))} 2>/dev/null || echo missing)
format='{{"started": %s, "end": "%s", "end_epoch": %s, "signalled": %s, '
format+='"token": "%s", "host": "%s"}}\\n'
end_epoch=$(date -d "$end" +%s 2>/dev/null || echo null)
printf "$format" "$started" "$end" "$end_epoch" "$signalled" "$token" "$(hostname)" > {result}.tmp
mv {result}.tmp {result}
"""


def _partition_check(jobs: SlurmJobs, name: str | None, report: Report) -> None:
    answer = jobs.run(["scontrol", "show", "partition", "-o", *([name] if name else [])])
    if answer.returncode != 0:
        report.add("partition", Outcome.FAIL, answer.text)
        return
    lines = [parse_scontrol_record(line) for line in answer.stdout.splitlines() if line.strip()]
    chosen = next((p for p in lines if name or p.get("Default") == "YES"), None)
    if chosen is None:
        report.add("partition", Outcome.FAIL, "no default partition: name one with --partition")
        return
    detail = (
        f"{chosen.get('PartitionName')}: MaxTime={chosen.get('MaxTime')} "
        f"DefaultTime={chosen.get('DefaultTime')} State={chosen.get('State')} "
        f"Nodes={chosen.get('Nodes')} MaxNodes={chosen.get('MaxNodes')}"
    )
    up = chosen.get("State") == "UP"
    report.add("partition", Outcome.OK if up else Outcome.WARN, detail)


def run_check(
    jobs: SlurmJobs,
    workdir: Path,
    options: SlurmSpec,
    *,
    wait_seconds: float = 600,
    sleep: Callable[[float], None] = time.sleep,
) -> Report:
    """Submit the probe into a fresh directory under `workdir` and report; removes nothing a
    user must keep (the probe's directory stays, for its log)."""
    report = Report()
    _partition_check(jobs, options.partition, report)
    directory = workdir / f"check-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True, mode=0o700)
    token = uuid.uuid4().hex
    (directory / PROBE_TOKEN).write_text(token)
    script = directory / "probe.sh"
    script.write_text(probe_script(directory))
    submit_options = [
        "--job-name=baton-check",
        "--time=1",
        f"--signal=B:USR1@{PROBE_SIGNAL_LEAD}",
        f"--output={directory / 'probe.log'}",
        f"--chdir={directory}",
        "--ntasks=1",
        *(f"--{flag}={value}" for flag, value in _resources(options)),
    ]
    submitted = time.time()
    try:
        job_id = jobs.submit(submit_options, str(script))
    except BackendError as exc:
        report.add("submit", Outcome.FAIL, str(exc))
        return report
    report.add("submit", Outcome.OK, f"job {job_id} accepted")
    record = None
    waited = 0.0
    while waited < wait_seconds:
        record = jobs.show(job_id)
        if record is None or record.state in ENDED_STATES:
            break
        sleep(2)
        waited += 2
    else:
        jobs.cancel(job_id)
        report.add("probe", Outcome.FAIL, f"still not done after {wait_seconds:g} s; cancelled")
        return report
    _probe_checks(directory, submitted, record.state if record else "aged out", report)
    return report


def _resources(options: SlurmSpec) -> list[tuple[str, str]]:
    pairs = [("partition", options.partition), ("account", options.account), ("qos", options.qos)]
    return [(flag, value) for flag, value in pairs if value]


def _probe_checks(directory: Path, submitted: float, state: str, report: Report) -> None:
    try:
        probe = json.loads((directory / PROBE_RESULT).read_text())
    except (OSError, ValueError):
        report.add(
            "shared filesystem",
            Outcome.FAIL,
            f"the probe (Slurm state {state}) left no result in {directory}: the compute node "
            "does not see this directory, or the job failed (see probe.log there)",
        )
        return
    report.add("queue", Outcome.OK, f"started {probe['started'] - submitted:.0f} s after sbatch")
    shared = probe["token"] == (directory / PROBE_TOKEN).read_text()
    report.add(
        "shared filesystem",
        Outcome.OK if shared else Outcome.FAIL,
        f"node {probe['host']} read the token this host wrote and wrote back its result"
        if shared
        else f"node {probe['host']} could not read {directory / PROBE_TOKEN}",
    )
    if probe["end_epoch"] is None:
        detail = f"the job could not read its end time ({probe['end']})"
        report.add("end time", Outcome.FAIL, detail)
    else:
        allocation = probe["end_epoch"] - probe["started"]
        report.add(
            "end time",
            Outcome.OK,
            f"the job reads EndTime={probe['end']}: {allocation:.0f} s after its start "
            "(segments take their deadline from it)",
        )
    if probe["signalled"] is None:
        report.add(
            "signal",
            Outcome.WARN,
            f"no --signal=B:USR1@{PROBE_SIGNAL_LEAD} warning within the {PROBE_SECONDS} s "
            "probe (Baton relies on the end time, not on the signal)",
        )
    elif probe["end_epoch"] is not None:
        early = probe["end_epoch"] - probe["signalled"]
        report.add(
            "signal",
            Outcome.OK,
            f"USR1 asked {PROBE_SIGNAL_LEAD} s before the end arrived {early:.0f} s before it",
        )
