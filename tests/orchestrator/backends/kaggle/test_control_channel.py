"""The orchestrator's end of a Kaggle job's control channel, against the emulator through the
official client (no session): a command Kaggle does not take yet stays pending on disk, is
written at a later poll (by a restarted orchestrator too), and a cancel is never turned back
into a pause. `test_control.py` here drives the channel end to end with real sessions."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from orchestrator.backends.kaggle.control import ControlChannel, Pending
from tests.kaggle_emulator import Emulator, FaultKind
from worker.control import Command
from worker.kaggle_access.client import KaggleAccount

TRY_AGAIN = "Please Try Again later"


def _ready_channel(
    alice: KaggleAccount, emulator: Emulator, job_id: str, workdir: Path
) -> ControlChannel:
    channel = ControlChannel(alice, job_id, workdir)
    channel.prepare()
    deadline = time.monotonic() + 120  # a hang guard
    while (dataset := emulator.dataset(channel.dataset.ref)) is None or (
        dataset.latest_ready(time.time()) is None
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return channel


def _written(channel: ControlChannel, launch_id: str) -> Command:
    deadline = time.monotonic() + 120  # a hang guard
    while (command := channel.dataset.read(launch_id)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return command


def _refuse_next_writes(emulator: Emulator, times: int = 1) -> None:
    emulator.faults.body_error = TRY_AGAIN
    emulator.faults.fail_next("CreateDatasetVersion", FaultKind.BODY_ERROR, times=times)


def test_a_pause_after_a_cancel_not_yet_written_leaves_the_cancel_to_be_written(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    """`baton cancel` then `baton pause` of the same segment: the segment is cancelled, never
    paused (which would commit and let the job resume)."""
    channel = _ready_channel(alice, emulator, "j1", tmp_path)
    _refuse_next_writes(emulator)
    channel.tell(Command.CANCEL, "j1-0002")
    assert channel.pending() == Pending(Command.CANCEL, "j1-0002")
    writes = len(emulator.calls("CreateDatasetVersion"))
    channel.tell(Command.PAUSE, "j1-0002")
    assert channel.pending() == Pending(Command.CANCEL, "j1-0002")
    assert len(emulator.calls("CreateDatasetVersion")) == writes  # the pause sent nothing
    channel.deliver()
    assert channel.pending() is None
    assert _written(channel, "j1-0002") is Command.CANCEL


def test_a_command_kaggle_has_not_taken_is_written_by_a_restarted_orchestrator_once(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pending command lives on disk: an orchestrator restarted before Kaggle took it
    writes it at its first poll, and no later poll writes it again. The orchestrator's log
    says why the command waits, and when it was written."""
    channel = _ready_channel(alice, emulator, "j2", tmp_path)
    _refuse_next_writes(emulator, times=2)
    caplog.set_level(logging.INFO, logger="orchestrator.backends.kaggle.control")
    channel.tell(Command.PAUSE, "j2-0001")
    channel.deliver()  # a poll while Kaggle still refuses: still pending
    assert channel.pending() == Pending(Command.PAUSE, "j2-0001")
    assert channel.dataset.read("j2-0001") is None

    restarted = ControlChannel(alice, "j2", tmp_path)
    assert restarted.pending() == Pending(Command.PAUSE, "j2-0001")
    restarted.deliver()
    assert restarted.pending() is None
    assert _written(restarted, "j2-0001") is Command.PAUSE
    ref = "alice/baton-ctl-j2"
    waiting = f"control channel {ref}: pause not written yet: control channel {ref}: {TRY_AGAIN}"
    assert [record.getMessage() for record in caplog.records] == [
        waiting,
        waiting,
        "control channel alice/baton-ctl-j2: pause for j2-0001",
    ]
    calls = len(emulator.calls())
    restarted.deliver()
    restarted.prepare()  # the channel is known to exist: nothing to ask Kaggle
    assert len(emulator.calls()) == calls


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        (FaultKind.BODY_ERROR, "control channel alice/baton-ctl-j3: The dataset title is invalid"),
        (FaultKind.SERVER_ERROR, "CreateDataset: HTTPError 500"),
    ],
)
def test_a_channel_kaggle_does_not_make_yet_is_no_error_and_is_made_at_the_next_launch_once(
    alice: KaggleAccount,
    emulator: Emulator,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fault: FaultKind,
    why: str,
) -> None:
    """Preparing the channel is best effort: a refused or failed create never stops a launch
    (the orchestrator's log says why), the next launch makes it, and a channel made once is
    never asked about again."""
    emulator.faults.body_error = "The dataset title is invalid"
    emulator.faults.fail_next("CreateDataset", fault)
    channel = ControlChannel(alice, "j3", tmp_path)
    with caplog.at_level(logging.WARNING, logger="orchestrator.backends.kaggle.control"):
        channel.prepare()
    assert [record.getMessage() for record in caplog.records] == [
        f"control channel alice/baton-ctl-j3 not created yet: {why}"
    ]
    assert emulator.dataset(channel.dataset.ref) is None
    channel.prepare()
    assert emulator.dataset(channel.dataset.ref) is not None
    calls = len(emulator.calls())
    channel.prepare()
    ControlChannel(alice, "j3", tmp_path).prepare()
    assert len(emulator.calls()) == calls


def test_a_command_for_a_channel_not_made_yet_makes_it_and_is_written_at_a_later_poll(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    """A launch that could not make the channel: the first command makes it, stays pending
    while Kaggle processes it, is written at a later poll, and the channel is then known."""
    channel = ControlChannel(alice, "j5", tmp_path)
    channel.tell(Command.CANCEL, "j5-0000")
    assert emulator.dataset(channel.dataset.ref) is not None
    assert channel.pending() == Pending(Command.CANCEL, "j5-0000")
    deadline = time.monotonic() + 120  # a hang guard
    while channel.pending() is not None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
        channel.deliver()
    assert _written(channel, "j5-0000") is Command.CANCEL
    calls = len(emulator.calls())
    ControlChannel(alice, "j5", tmp_path).prepare()
    assert len(emulator.calls()) == calls


@pytest.mark.parametrize(
    "state",
    [
        "not json",
        '["pending"]',
        '{"pending": "pause"}',
        '{"pending": {"command": "pause"}}',
        '{"pending": {"launch": "j4-0000"}}',
        '{"pending": {"command": "stop", "launch": "j4-0000"}}',
    ],
)
def test_a_damaged_pending_record_is_no_command_and_the_next_command_is_written(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path, state: str
) -> None:
    channel = _ready_channel(alice, emulator, "j4", tmp_path)
    channel.path.write_text(state)
    assert channel.pending() is None
    calls = len(emulator.calls("CreateDatasetVersion"))
    channel.deliver()
    assert len(emulator.calls("CreateDatasetVersion")) == calls
    channel.tell(Command.CANCEL, "j4-0000")
    assert channel.pending() is None
    assert _written(channel, "j4-0000") is Command.CANCEL
