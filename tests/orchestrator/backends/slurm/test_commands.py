"""Slurm's answers, recorded on the test cluster, read the way the backend needs them: states,
pending reasons, end times, job ids, and failures sorted into the backend error contract."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.backends.base import (
    AccountRefused,
    LaunchRequest,
    Rejected,
    SessionStatus,
    Transient,
)
from orchestrator.backends.slurm.backend import SlurmBackend, SlurmHandle
from orchestrator.backends.slurm.commands import (
    Answer,
    SlurmJobs,
    parse_job_id,
    parse_scontrol_record,
    record_from_scontrol,
)
from orchestrator.spec import SlurmSpec
from tests.orchestrator.backends.slurm import recorded
from worker.boundary.contract import SegmentSpec
from worker.boundary.paths import SessionPaths


class Replay:
    """Answers each command by its name from recorded outputs; remembers what was run."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> Answer:
        self.calls.append(list(argv))
        return self.answers[argv[0]]


def ok(stdout: str) -> Answer:
    return Answer(0, stdout, "")


def failed(stderr: str) -> Answer:
    return Answer(1, "", stderr)


def test_a_record_with_spaces_in_a_value_keeps_every_field() -> None:
    fields = parse_scontrol_record(recorded.SCONTROL_RUNNING)
    assert fields["WorkDir"] == "/tmp/a dir with spaces"
    assert fields["Comment"] == "fill-0000 "  # scontrol pads the field with a second space
    assert fields["JobState"] == "RUNNING"
    assert fields["CPUs/Task"] == "8"
    assert record_from_scontrol(fields).comment == "fill-0000"


def test_the_allocation_end_time_is_read_in_the_cluster_local_time() -> None:
    record = record_from_scontrol(parse_scontrol_record(recorded.SCONTROL_RUNNING))
    assert record.end_time == datetime(2026, 11, 23, 23, 28, 51).timestamp()
    assert record.start_time is not None
    assert record.end_time - record.start_time == 60


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (recorded.SCONTROL_PENDING_RESOURCES, "Resources"),
        (recorded.SCONTROL_PENDING_PRIORITY, "Priority"),
        (recorded.SCONTROL_PENDING_QOS, "QOSMaxJobsPerUserLimit"),
    ],
)
def test_a_pending_job_is_queued_and_says_why(line: str, reason: str, tmp_path: Path) -> None:
    jobs = SlurmJobs(Replay({"scontrol": ok(line)}))
    backend = SlurmBackend(tmp_path, SlurmSpec(), jobs)
    handle = str(SlurmHandle("j1-0000", "6"))
    assert backend.status(handle) is SessionStatus.QUEUED
    assert backend.queue_reason(handle) == reason


def test_a_job_aged_out_of_slurmctld_is_judged_by_what_it_left(tmp_path: Path) -> None:
    """MinJobAge: scontrol forgets an ended job; without accounting the session's own records
    say whether it ran."""
    replay = Replay({"scontrol": failed(recorded.SCONTROL_INVALID), "sacct": failed("x")})
    backend = SlurmBackend(tmp_path, SlurmSpec(), SlurmJobs(replay))
    handle = str(SlurmHandle("j1-0000", "6"))
    assert backend.status(handle) is SessionStatus.LOST  # never started: nothing on disk
    paths = SessionPaths(tmp_path / "j1-0000")
    paths.root.mkdir()
    paths.slurm_started.write_text('{"job_id": "6"}')
    assert backend.status(handle) is SessionStatus.FINISHED


def test_find_adopts_a_job_known_only_by_its_own_start_record(tmp_path: Path) -> None:
    replay = Replay({"squeue": ok(""), "sacct": failed(recorded.SACCT_DISABLED)})
    backend = SlurmBackend(tmp_path, SlurmSpec(), SlurmJobs(replay))
    assert backend.find("j1-0000") is None
    paths = SessionPaths(tmp_path / "j1-0000")
    paths.root.mkdir()
    paths.slurm_started.write_text('{"job_id": "41"}')
    assert backend.find("j1-0000") == "j1-0000@41"


def test_find_prefers_the_live_job_under_a_launch_id(tmp_path: Path) -> None:
    replay = Replay({"squeue": ok(recorded.SQUEUE_SEVERAL)})
    backend = SlurmBackend(tmp_path, SlurmSpec(), SlurmJobs(replay))
    assert backend.find("jsmoke-0000") == "jsmoke-0000@4"
    assert replay.calls[0][-3:] == ["baton-jsmoke-0000", "-o", "%i|%T|%r|%j|%k"]


def test_sbatch_answers_are_sorted_into_the_error_contract() -> None:
    assert parse_job_id("1234\n") == "1234"
    assert parse_job_id("1234;cluster\n") == "1234"
    with pytest.raises(Transient):
        parse_job_id("")
    refused = SlurmJobs(Replay({"sbatch": failed(recorded.SBATCH_BAD_PARTITION)}))
    with pytest.raises(AccountRefused, match="Invalid partition"):
        refused.submit([], "script")
    busy = SlurmJobs(Replay({"sbatch": failed(recorded.SBATCH_BUSY)}))
    with pytest.raises(Transient):
        busy.submit([], "script")
    odd = SlurmJobs(Replay({"sbatch": failed("sbatch: error: something new")}))
    with pytest.raises(Rejected):
        odd.submit([], "script")


def test_accounting_is_asked_once_and_used_only_where_it_answers(tmp_path: Path) -> None:
    replay = Replay({"squeue": ok(""), "sacct": failed(recorded.SACCT_DISABLED)})
    jobs = SlurmJobs(replay)
    assert jobs.named("baton-x") == []
    assert jobs.named("baton-y") == []
    assert [call[0] for call in replay.calls].count("sacct") == 1


def test_launch_writes_the_session_and_submits_with_the_launch_id(tmp_path: Path) -> None:
    replay = Replay({"sbatch": ok("77\n")})
    options = SlurmSpec(partition="gpu", account="lab", gres="gpu:1", cpus=4, mem="16G")
    backend = SlurmBackend(tmp_path, options, SlurmJobs(replay))
    spec = SegmentSpec("j1", 0, "t:T", {}, total_steps=10, limit_seconds=90)
    handle = backend.launch(LaunchRequest("j1-0000", spec, None))
    assert handle == "j1-0000@77"
    argv = replay.calls[0]
    assert "--job-name=baton-j1-0000" in argv
    assert "--comment=j1-0000" in argv
    assert "--time=2" in argv  # 90 s rounds up to whole minutes
    for option in ("--partition=gpu", "--account=lab", "--gres=gpu:1", "--mem=16G"):
        assert option in argv
    assert "--cpus-per-task=4" in argv
    assert "--export=NONE" in argv
    paths = SessionPaths(tmp_path / "j1-0000")
    assert argv[-1] == str(paths.slurm_script)
    assert SegmentSpec.read(paths.segment) == spec
