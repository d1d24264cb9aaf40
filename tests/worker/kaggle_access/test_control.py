"""The Kaggle control channel through the official client: a command written as a version's notes
reaches only the segment it names, a write while the first version processes waits (403), and
the kernel's side reads it with one GetDataset call."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.backends.base import Transient
from orchestrator.backends.kaggle.control import ControlChannel
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.kaggle import account_on
from worker.control import Command, relay
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.control import ControlDataset, KaggleControlSource, command_for

# Long enough that the first write certainly meets the first version still processing.
SLOW_PROCESSING = {"dataset_processing_seconds": 4.0}


def _wait_ready(emulator: Emulator, ref: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        dataset = emulator.dataset(ref)
        if dataset is not None and dataset.latest_ready(time.time()) is not None:
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
    deadline = time.monotonic() + 30
    while dataset.read("j1-0000") is not Command.PAUSE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert dataset.read("j1-0001") is None
    assert emulator.dataset("alice/baton-ctl-j1").is_private


def test_a_write_while_the_first_version_processes_stays_pending_until_it_is_written(
    tmp_path: Path,
) -> None:
    with start_emulator(tmp_path / "kaggle", **(FAST_EMULATOR | SLOW_PROCESSING)) as emulator:
        _pending_until_written(account_on(emulator), emulator, tmp_path)


def _pending_until_written(alice: KaggleAccount, emulator: Emulator, tmp_path: Path) -> None:
    channel = ControlChannel(alice, "j2", tmp_path)
    channel.prepare()
    channel.tell(Command.PAUSE, "j2-0001")  # 403: the first version is still processing
    assert channel.pending() is not None
    with pytest.raises(Transient):
        channel.dataset.send(Command.PAUSE, "j2-0001")
    channel.tell(Command.CANCEL, "j2-0001")  # a cancel overrides the pause
    _wait_ready(emulator, "alice/baton-ctl-j2")
    channel.deliver()
    assert channel.pending() is None
    deadline = time.monotonic() + 30
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
