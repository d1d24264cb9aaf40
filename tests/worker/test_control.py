"""The control channel: a pause commits at the next step boundary (before the first step too),
a cancel ends without committing, and a remote channel is read no more often than its interval."""

import pytest

from tests.support.clock import TickingClock
from tests.support.segments import make_root, make_spec, output_checkpoint
from worker.boundary.contract import Outcome
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import SessionPaths
from worker.control import Command, ControlFile, ControlPoller, parse_command
from worker.runtime import SegmentRunner
from worker.stopflag import StopFlag


class Written:
    """A channel whose text the test sets, counting reads (each is an API call on Kaggle)."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.reads = 0

    def read(self) -> str | None:
        self.reads += 1
        return self.text


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("pause", Command.PAUSE),
        (" CANCEL\n", Command.CANCEL),
        ("", None),
        ("go", None),
        (None, None),
    ],
)
def test_only_known_commands_count(text, command):
    assert parse_command(text) is command


def test_the_channel_is_read_at_most_once_per_interval_and_the_first_command_sticks():
    now = [0.0]
    source = Written()
    poller = ControlPoller(source, interval=60.0, clock=lambda: now[0])
    for second in range(0, 180, 5):
        now[0] = float(second)
        assert poller.poll() is None
    assert source.reads == 3  # at 0, 60 and 120 s
    source.text = "pause"
    now[0] = 181.0
    assert poller.poll() is Command.PAUSE
    source.text = None
    now[0] = 500.0
    assert poller.poll() is Command.PAUSE
    assert source.reads == 4


def run_with_control(root, spec, text):
    make_root(root, spec)
    SessionPaths(root).control.write_text(text)
    poller = ControlPoller(ControlFile(SessionPaths(root).control), 0.0, TickingClock())
    runner = SegmentRunner(
        spec,
        root,
        process_start=0.0,
        clock=TickingClock(),
        stop_flag=StopFlag(),
        control=poller,
    )
    return runner.run()


def test_a_pause_before_the_first_step_commits_the_state_it_was_given(tmp_path):
    spec = make_spec(total_steps=10)
    result = run_with_control(tmp_path, spec, "pause")
    assert (result.outcome, result.end_step) == (Outcome.STOPPED, 0)
    assert verify_checkpoint(output_checkpoint(tmp_path, spec)).step == 0


def test_a_cancel_ends_the_segment_without_a_commit(tmp_path):
    spec = make_spec(total_steps=10)
    result = run_with_control(tmp_path, spec, "cancel")
    assert (result.outcome, result.end_step, result.model_digest) == (Outcome.CANCELLED, 0, None)
    assert not output_checkpoint(tmp_path, spec).exists()
