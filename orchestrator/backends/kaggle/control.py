"""The orchestrator's end of a Kaggle job's control channel (worker/kaggle_access/control.py).

`baton pause` and `baton cancel` become a command written as a new version of the job's control
dataset; a kernel with internet and the BATON_KAGGLE_KEY Secret reads it within its poll
interval, commits (pause) or not (cancel), and ends. Writing may have to wait (the dataset's
first version processes, a 429): the command is kept on disk as pending and written again at
each status poll until Kaggle takes it, so neither cancel nor pause ever blocks on it, and a
channel that cannot be written never stops the job's own bookkeeping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends.kaggle.findings import read_json_state, write_json_state
from worker.boundary.errors import BackendError
from worker.control import Command
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.control import ControlDataset

log = logging.getLogger(__name__)


def control_slug(job_id: str) -> str:
    return f"baton-ctl-{job_id}"


@dataclass(frozen=True)
class Pending:
    command: Command
    launch_id: str


class ControlChannel:
    """The job's control dataset plus the command not yet written to it (`control.json`)."""

    def __init__(self, account: KaggleAccount, job_id: str, workdir: Path) -> None:
        self.dataset = ControlDataset(account, control_slug(job_id), workdir / "control-staging")
        self.path = workdir / "control.json"

    @property
    def slug(self) -> str:
        return self.dataset.slug

    def prepare(self) -> None:
        """Create the dataset before the first push, so that a command can be written at once
        (a new version waits for the first one to process); best effort."""
        if read_json_state(self.path).get("created"):
            return
        try:
            self.dataset.ensure()
        except BackendError as exc:
            log.warning("control channel %s not created yet: %s", self.dataset.ref, exc)
            return
        write_json_state(self.path, read_json_state(self.path) | {"created": True})

    def tell(self, command: Command, launch_id: str) -> None:
        """Ask the segment `launch_id` to pause or cancel; a cancel overrides a pending pause."""
        pending = self.pending()
        if pending == Pending(Command.CANCEL, launch_id):
            return
        write_json_state(
            self.path,
            read_json_state(self.path)
            | {"pending": {"command": command.value, "launch": launch_id}},
        )
        self.deliver()

    def pending(self) -> Pending | None:
        value = read_json_state(self.path).get("pending")
        if not isinstance(value, dict):
            return None
        try:
            return Pending(Command(value["command"]), str(value["launch"]))
        except (KeyError, ValueError):
            return None

    def deliver(self) -> None:
        """Write the pending command, if any; on failure it stays pending for the next poll."""
        pending = self.pending()
        if pending is None:
            return
        try:
            self.dataset.send(pending.command, pending.launch_id)
        except BackendError as exc:
            log.warning(
                "control channel %s: %s not written yet: %s",
                self.dataset.ref,
                pending.command,
                exc,
            )
            return
        log.info(
            "control channel %s: %s for %s", self.dataset.ref, pending.command, pending.launch_id
        )
        state = read_json_state(self.path)
        state.pop("pending", None)
        write_json_state(self.path, state | {"created": True})
