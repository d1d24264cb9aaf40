"""The Kaggle control channel: a private per-job dataset whose newest version's notes carry the
owner's command to a running kernel.

Nothing outside a Kaggle kernel can stop it (no session id is exposed), so the kernel listens.
The orchestrator writes `pause` or `cancel` as the notes of a new version of the job's control
dataset (`baton-control <command> <launch id>`); the kernel reads them with one `GetDataset`
call per poll (kagglesdk's `ApiDataset.versions[].version_notes`) and acts only on a command
that names its own launch id, so a pause of segment 3 never stops segment 4 after a resume.

Why a new version and not the dataset's metadata: `kaggle datasets metadata --update` does not
reliably change a dataset's subtitle or description (kaggle-cli #995), while every version's
notes are stored with it. A new version is refused with 403 while the dataset's first version is
still processing (kagglehub PR #182): the write is then tried again later (`Transient`).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from kagglesdk.datasets.types.dataset_api_service import ApiDataset

from worker.boundary.errors import BackendError, Rejected, Transient
from worker.control import Command, parse_command
from worker.kaggle_access.client import KaggleAccount, KaggleNotFound

NOTES_PREFIX = "baton-control"
# The one file each version carries (a version without files is not something the CLI sends).
COMMAND_FILE = "command.txt"
_EXISTS = ("already exists", "already in use")

log = logging.getLogger(__name__)


def command_notes(command: Command, launch_id: str) -> str:
    return f"{NOTES_PREFIX} {command.value} {launch_id}"


def command_for(notes: str | None, launch_id: str) -> Command | None:
    """The command these notes give the segment `launch_id`; None for any other notes."""
    parts = (notes or "").split()
    if len(parts) != 3 or parts[0] != NOTES_PREFIX or parts[2] != launch_id:
        return None
    return parse_command(parts[1])


def _newest_notes(dataset: ApiDataset) -> str | None:
    versions = sorted(dataset.versions or [], key=lambda v: v.version_number)
    return versions[-1].version_notes if versions else None


class ControlDataset:
    """The job's control dataset, as the orchestrator writes it and a kernel reads it."""

    def __init__(self, account: KaggleAccount, slug: str, staging: Path) -> None:
        self.account = account
        self.slug = slug
        self.staging = staging

    @property
    def ref(self) -> str:
        return f"{self.account.username}/{self.slug}"

    def read(self, launch_id: str) -> Command | None:
        """One GetDataset call: the command the newest version gives `launch_id`, if any."""
        dataset = self.account.own_dataset(self.slug)
        return None if dataset is None else command_for(_newest_notes(dataset), launch_id)

    def ensure(self) -> None:
        """Create the dataset (its first version carries no command) unless it exists."""
        if self.account.own_dataset(self.slug) is None:
            self._create()

    def send(self, command: Command, launch_id: str) -> None:
        """Write `command` for `launch_id` as a new version; Transient until it is written."""
        folder = self._folder(command.value)
        notes = command_notes(command, launch_id)
        try:
            response = self.account.transfer(
                "CreateDatasetVersion",
                lambda api: api.dataset_create_version(str(folder), notes, quiet=True),
                busy_403=True,
            )
        except KaggleNotFound:
            self._create()
            raise Transient(
                f"created the control channel {self.ref}; the command follows"
            ) from None
        _check(response, self.ref)

    def _create(self) -> None:
        folder = self._folder("")
        try:
            response = self.account.transfer(
                "CreateDataset",
                lambda api: api.dataset_create_new(str(folder), public=False, quiet=True),
            )
            _check(response, self.ref)
        except Rejected as exc:
            if any(text in str(exc) for text in _EXISTS):
                return  # an earlier create took effect
            raise

    def _folder(self, text: str) -> Path:
        folder = self.staging / "control"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / COMMAND_FILE).write_text(text + "\n")
        metadata = {"id": self.ref, "title": self.slug, "licenses": [{"name": "CC0-1.0"}]}
        (folder / "dataset-metadata.json").write_text(json.dumps(metadata))
        return folder


def _check(response: object, ref: str) -> None:
    error = getattr(response, "error", None)
    if not error:
        return
    if "try again" in error.lower() or "processing" in error.lower():
        raise Transient(f"control channel {ref}: {error}")
    raise Rejected(f"control channel {ref}: {error}")


class KaggleControlSource:
    """The kernel's side (a `worker.control.ControlSource`): the command for its own launch id;
    None whenever Kaggle cannot be read (the next poll tries again)."""

    def __init__(self, dataset: ControlDataset, launch_id: str) -> None:
        self.dataset = dataset
        self.launch_id = launch_id
        self.reads = 0

    def read(self) -> str | None:
        self.reads += 1
        try:
            command = self.dataset.read(self.launch_id)
        except BackendError as exc:
            log.warning("control channel not readable: %s", exc)
            return None
        return command.value if command is not None else None
