"""The control channel: what the job's owner asks a running session, read between steps.

Nothing outside a Kaggle kernel can stop it, so the session listens. The orchestrator writes a
command into a small per-session object; the worker polls it at a spaced interval and acts on
it at its next step boundary, every rank alike (the stop agreement):

- `pause`: commit a checkpoint now and end (the job pauses, and resumes from it);
- `cancel`: end now without committing (the job is cancelled; a commit would be thrown away).

Locally the object is a file in the session directory that the supervisor writes. Standard
library only: this module travels into Kaggle kernels with the worker.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

log = logging.getLogger("worker.control")

# A local file costs nothing to read: look at it at most this often.
LOCAL_CONTROL_SECONDS = 0.5


class Command(enum.StrEnum):
    PAUSE = "pause"
    CANCEL = "cancel"


def parse_command(text: str | None) -> Command | None:
    """A command from what the channel holds; anything else (empty, unknown) is no command."""
    if text is None:
        return None
    try:
        return Command(text.strip().lower())
    except ValueError:
        return None


class ControlSource(Protocol):
    def read(self) -> str | None:
        """The channel's current text, or None if there is none (yet)."""
        ...


class ControlFile:
    """The local channel: a file the session's supervisor writes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> str | None:
        try:
            return self.path.read_text()
        except OSError:
            return None


class ControlPoller:
    """Reads its source at most every `interval` seconds and remembers the first command.

    The interval is what bounds a remote channel's calls (each read of a Kaggle object is one
    API call against the account's budget); the first command sticks, so a session that was
    told to pause never goes back to training.
    """

    def __init__(self, source: ControlSource, interval: float, clock: Callable[[], float]) -> None:
        self.source = source
        self.interval = interval
        self.clock = clock
        self.command: Command | None = None
        self._last_read: float | None = None
        self.reads = 0

    def poll(self) -> Command | None:
        if self.command is not None:
            return self.command
        now = self.clock()
        if self._last_read is not None and now - self._last_read < self.interval:
            return None
        self._last_read = now
        self.reads += 1
        self.command = parse_command(self.source.read())
        if self.command is not None:
            log.info("control channel: %s", self.command)
        return self.command


def relay(source: ControlSource, target: Path, interval: float, done: threading.Event) -> None:
    """Copy the first command `source` gives into the local control file `target`, reading the
    source once per `interval` until then or until `done` is set.

    A Kaggle kernel runs this beside its worker: the remote channel costs one API call per
    interval, and the worker's ranks go on reading the local file as they do everywhere.
    """
    while not done.is_set():
        command = parse_command(source.read())
        if command is not None:
            log.info("control channel: the owner asks to %s", command)
            temporary = target.with_name(target.name + ".tmp")
            temporary.write_text(command.value)
            os.replace(temporary, target)
            return
        done.wait(interval)
