"""The Kaggle control channel through the official client: a command written as a version's notes
reaches only the segment it names, a write while the first version processes waits (403), and
the kernel's side reads it with one GetDataset call."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from orchestrator.backends.base import Rejected, Transient
from orchestrator.backends.kaggle.control import ControlChannel
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator
from tests.kaggle_emulator.clock import ManualClock
from tests.support.kaggle import account_on
from worker.control import Command, relay
from worker.kaggle_access.client import KaggleAccount, KaggleServerError
from worker.kaggle_access.control import ControlDataset, KaggleControlSource, command_for

PROCESSING_SECONDS = 4.0


def _wait_ready(emulator: Emulator, ref: str) -> None:
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        dataset = emulator.dataset(ref)
        if dataset is not None and dataset.latest_ready(emulator.state.clock.now()) is not None:
            return
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("notes", "command"),
    [
        ("baton-control pause j1-0003", Command.PAUSE),
        ("baton-control cancel j1-0003", Command.CANCEL),
        ("baton-control pause j1-0002", None),  # another segment's
        ("baton-control stop j1-0003", None),
        ("baton checkpoint-s00003-step120-abc.tar", None),
        (None, None),
    ],
)
def test_only_a_command_naming_this_segment_counts(notes: str | None, command: Command | None):
    assert command_for(notes, "j1-0003") is command


def test_a_written_command_reaches_the_named_segment_only(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    dataset = ControlDataset(alice, "baton-ctl-j1", tmp_path)
    dataset.ensure()
    assert dataset.read("j1-0000") is None  # a 404 while the new dataset is invisible: no command
    _wait_ready(emulator, "alice/baton-ctl-j1")
    assert dataset.read("j1-0000") is None  # the first version carries no command
    dataset.send(Command.PAUSE, "j1-0000")
    deadline = time.monotonic() + 120  # a hang guard
    while dataset.read("j1-0000") is not Command.PAUSE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert dataset.read("j1-0001") is None
    assert emulator.dataset("alice/baton-ctl-j1").is_private


def test_a_write_while_the_first_version_processes_stays_pending_until_it_is_written(
    tmp_path: Path,
) -> None:
    """The emulator's clock stands still until the test moves it, so the first version is still
    processing when the command is written, however slow this machine is."""
    clock = ManualClock()
    options = FAST_EMULATOR | {"dataset_processing_seconds": PROCESSING_SECONDS, "clock": clock}
    with start_emulator(tmp_path / "kaggle", **options) as emulator:
        channel = ControlChannel(account_on(emulator), "j2", tmp_path)
        channel.prepare()
        channel.tell(Command.PAUSE, "j2-0001")  # 403: the first version is still processing
        assert channel.pending() is not None
        with pytest.raises(Transient):
            channel.dataset.send(Command.PAUSE, "j2-0001")
        channel.tell(Command.CANCEL, "j2-0001")  # a cancel overrides the pause
        clock.advance(PROCESSING_SECONDS)
        _wait_ready(emulator, "alice/baton-ctl-j2")
        channel.deliver()
        assert channel.pending() is None
        clock.advance(PROCESSING_SECONDS)  # the command's version is processed
        deadline = time.monotonic() + 120  # a hang guard
        while channel.dataset.read("j2-0001") is not Command.CANCEL:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_the_kernel_relays_the_command_to_its_local_file_one_call_per_interval(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    dataset = ControlDataset(alice, "baton-ctl-j3", tmp_path / "staging")
    dataset.ensure()
    _wait_ready(emulator, "alice/baton-ctl-j3")
    source = KaggleControlSource(dataset, "j3-0000")
    target = tmp_path / "control"
    done = threading.Event()
    listener = threading.Thread(target=relay, args=(source, target, 0.5, done), daemon=True)
    before = len(emulator.calls("GetDataset"))
    listener.start()
    time.sleep(1.2)
    assert not target.exists()
    dataset.send(Command.CANCEL, "j3-0000")
    listener.join(timeout=30)
    assert target.read_text() == "cancel"
    # One GetDataset per read, and reads spaced by the interval (not a busy loop).
    assert len(emulator.calls("GetDataset")) - before == source.reads
    assert source.reads >= 3
    done.set()


def test_without_the_channel_the_relay_reads_nothing_into_the_file(tmp_path: Path) -> None:
    class Silent:
        reads = 0

        def read(self) -> str | None:
            self.reads += 1
            return None

    done = threading.Event()
    source = Silent()
    listener = threading.Thread(
        target=relay, args=(source, tmp_path / "control", 0.05, done), daemon=True
    )
    listener.start()
    time.sleep(0.3)
    done.set()
    listener.join(timeout=5)
    assert not listener.is_alive()
    assert not (tmp_path / "control").exists()
    assert source.reads >= 2


def _read_when_written(dataset: ControlDataset, launch_id: str) -> Command | None:
    deadline = time.monotonic() + 120  # a hang guard
    while (command := dataset.read(launch_id)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return command


def test_a_poll_that_cannot_read_kaggle_is_no_command_and_says_why_in_the_session_log(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The kernel's side: a poll Kaggle does not answer gives no command (the segment trains
    on), says why in the session's log (`baton logs`), and the next poll reads the command."""
    dataset = ControlDataset(alice, "baton-ctl-j4", tmp_path)
    dataset.ensure()
    _wait_ready(emulator, "alice/baton-ctl-j4")
    dataset.send(Command.CANCEL, "j4-0000")
    assert _read_when_written(dataset, "j4-0000") is Command.CANCEL
    source = KaggleControlSource(dataset, "j4-0000")
    emulator.faults.fail_next("GetDataset", FaultKind.SERVER_ERROR)
    with caplog.at_level(logging.WARNING, logger="worker.kaggle_access.control"):
        assert source.read() is None
    assert [record.getMessage() for record in caplog.records] == [
        "control channel not readable: GetDataset: HTTPError 500"
    ]
    assert source.read() == "cancel"
    assert source.reads == 2


def test_a_command_for_a_channel_not_made_yet_makes_it_and_follows_once_it_is_ready(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    dataset = ControlDataset(alice, "baton-ctl-j5", tmp_path)
    with pytest.raises(Transient) as made:
        dataset.send(Command.PAUSE, "j5-0000")
    assert str(made.value) == "created the control channel alice/baton-ctl-j5; the command follows"
    created = emulator.dataset("alice/baton-ctl-j5")
    assert created is not None
    assert created.is_private
    _wait_ready(emulator, "alice/baton-ctl-j5")
    assert dataset.read("j5-0000") is None  # the first version carries no command
    dataset.send(Command.PAUSE, "j5-0000")
    assert _read_when_written(dataset, "j5-0000") is Command.PAUSE


def test_a_channel_made_twice_is_adopted_never_refused(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    """A second orchestrator, or a retry, that finds no channel while Kaggle's read lags behind
    the first create gets Kaggle's "already exists", and takes the channel as made."""
    dataset = ControlDataset(alice, "baton-ctl-j6", tmp_path)
    dataset.ensure()
    emulator.faults.fail_next("GetDataset", FaultKind.NOT_FOUND)
    dataset.ensure()
    assert len(emulator.calls("CreateDataset")) == 2
    _wait_ready(emulator, "alice/baton-ctl-j6")
    dataset.send(Command.CANCEL, "j6-0000")
    assert _read_when_written(dataset, "j6-0000") is Command.CANCEL


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("The dataset is still processing", Transient),
        ("Please Try Again later", Transient),
        ("You cannot create a new version of this dataset", Rejected),
    ],
)
def test_an_error_kaggle_answers_in_the_body_keeps_the_command_pending_and_says_why(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path, error: str, kind: type[Exception]
) -> None:
    """Kaggle refuses a new version with a 200 whose body holds the error: the command is not
    written, so `baton pause` stays pending (never lost) and is written at the next poll; a
    passing refusal (processing, try again) is retried, any other one names the channel."""
    channel = ControlChannel(alice, "j7", tmp_path)
    channel.prepare()
    _wait_ready(emulator, "alice/baton-ctl-j7")
    emulator.faults.body_error = error
    emulator.faults.fail_next("CreateDatasetVersion", FaultKind.BODY_ERROR, times=2)
    with pytest.raises(kind) as refused:
        channel.dataset.send(Command.PAUSE, "j7-0001")
    assert type(refused.value) is kind
    assert str(refused.value) == f"control channel alice/baton-ctl-j7: {error}"
    channel.tell(Command.PAUSE, "j7-0001")
    assert channel.pending() is not None
    assert channel.dataset.read("j7-0001") is None
    channel.deliver()
    assert channel.pending() is None
    assert _read_when_written(channel.dataset, "j7-0001") is Command.PAUSE


def test_a_create_kaggle_refuses_or_fails_is_an_error_naming_the_channel_or_the_call(
    alice: KaggleAccount, emulator: Emulator, tmp_path: Path
) -> None:
    emulator.faults.body_error = "The dataset title is invalid"
    emulator.faults.fail_next("CreateDataset", FaultKind.BODY_ERROR)
    dataset = ControlDataset(alice, "baton-ctl-j8", tmp_path)
    with pytest.raises(Rejected) as refused:
        dataset.ensure()
    assert str(refused.value) == "control channel alice/baton-ctl-j8: The dataset title is invalid"
    assert emulator.dataset("alice/baton-ctl-j8") is None
    # A create Kaggle fails to answer is a passing error that names the call.
    emulator.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR)
    with pytest.raises(KaggleServerError) as failed:
        dataset.ensure()
    assert str(failed.value) == "CreateDataset: HTTPError 500"
    assert emulator.dataset("alice/baton-ctl-j8") is None


def test_a_command_sent_while_the_first_version_processes_waits_saying_why(
    tmp_path: Path,
) -> None:
    """Kaggle answers 403 to a new version while the dataset's first one processes (kagglehub
    PR #182): the command is tried again later (Transient), and the reason the orchestrator
    logs says so, never that Kaggle refused access. Processing takes 10 minutes here, so the
    write certainly meets it, however slow the machine."""
    slow = FAST_EMULATOR | {"dataset_processing_seconds": 600.0}
    with start_emulator(tmp_path / "kaggle", **slow) as emulator:
        alice = account_on(emulator)
        dataset = ControlDataset(alice, "baton-ctl-j9", tmp_path)
        dataset.ensure()
        deadline = time.monotonic() + 120  # a hang guard
        while alice.own_dataset("baton-ctl-j9") is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with pytest.raises(Transient) as busy:
            dataset.send(Command.PAUSE, "j9-0000")
    assert type(busy.value) is Transient
    assert str(busy.value) == (
        "CreateDatasetVersion: the dataset's first version is still processing"
    )
