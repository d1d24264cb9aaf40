"""A job's checkpoint dataset on Kaggle: one private dataset, one version per committed segment.

Each version holds the checkpoint's files at its top level, under names that carry their paths
in the checkpoint, linked into the upload (never copied), or, for a checkpoint of more files
than a version holds, one archive: `worker/boundary/version_layout.py` owns the names and every
layout a version may hold. Publishing is idempotent: a version is looked up by those names and
sizes (or by the notes naming the checkpoint) before anything is uploaded, so a retried publish
never makes a second copy, and a truncated upload is never mistaken for the checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kagglesdk import KaggleClient
from kagglesdk.datasets.types.dataset_api_service import (
    ApiDataset,
    ApiDatasetVersion,
    ApiListDatasetFilesRequest,
    ApiListDatasetFilesResponse,
)

from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Pending, Rejected, Transient
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE
from worker.boundary.version_layout import (
    TAR_SUFFIX,
    checkpoint_files,
    listings,
    published_name,
    segment_prefix,
    stage_upload,
    stem_of,
    unpack_version,
)
from worker.kaggle_access.client import KaggleAccount, KaggleNotFound

# How long a version Kaggle accepted may take to show up, and then to finish processing. Past
# either, Kaggle has silently dropped it: what it does when the account's private dataset storage
# is full (kaggle-api #284: the dataset 404s; #424: it stays "being created"). No API call says so.
VISIBLE_WITHIN_SECONDS = 600.0
PROCESSING_WITHIN_SECONDS = 3600.0
# Kaggle's DatabundleVersionStatus: only READY is mountable; FAILED and DELETED never will be;
# everything else (NOT_YET_PERSISTED, BLOBS_RECEIVED, ..., REPROCESSING) is still on its way.
READY = "READY"
_LOST = {"FAILED", "DELETED"}
# A checkpoint whose versions Kaggle fails to process is uploaded at most this many times.
MAX_UPLOADS = 3
_FILES_PAGE = 200
_TRANSIENT_ERROR = re.compile(r"try again|rate limit|processing", re.IGNORECASE)
# The job's own dataset exists already: Kaggle's "already exists", or kaggle 2.2.4's
# dataset_create_new, which checks the title itself before uploading and answers 'The requested
# title "..." is already in use by a dataset' (kaggle-api #424, after a create that answered 500).
_EXISTS_ERROR = re.compile(r"already exists|already in use", re.IGNORECASE)


class DatasetExists(Transient):
    """A create found the job's dataset there already (an earlier create took effect)."""


class StillProcessing(Pending):
    """A version Baton uploaded is visible and not READY yet."""


def storage_full_reason(ref: str, name: str, minutes: float) -> str:
    return (
        f"Kaggle accepted {name} for {ref} {minutes:.0f} min ago and has not made it READY: it "
        f"does this silently when the account's private dataset storage is full (kaggle-api "
        f"#284, #424). Delete old versions or private datasets on kaggle.com, then resume the job"
    )


def version_notes(archive: str) -> str:
    """The notes Baton writes on the version carrying `archive`: found again by them while
    Kaggle processes it (its files cannot be listed until it is READY)."""
    return f"baton {archive}"


def result_name(segment_index: int) -> str:
    return f"result-s{segment_index:05d}.json"


@dataclass(frozen=True)
class PublishedCheckpoint:
    version: int
    file_name: str


class CheckpointDataset:
    def __init__(
        self,
        account: KaggleAccount,
        slug: str,
        staging: Path,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.account = account
        self.owner = account.username
        self.slug = slug
        self.staging = staging

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

    def ensure_published(
        self, expect: CheckpointRef, checkpoint_dir: Path, result: Path | None = None
    ) -> PublishedCheckpoint:
        """The ready version holding this checkpoint, publishing it first if needed.

        Raises Transient while a version is processing or Kaggle is briefly unable;
        the engine simply asks again on a later tick. `result` (a self-chaining segment's
        result.json) travels in the same version, so the orchestrator can collect from it.
        """
        name = published_name(expect, checkpoint_dir)
        folder = self._staged(checkpoint_dir, name, expect)
        dataset = self.account.own_dataset(self.slug)
        marker = self.staging / f"{name}.uploaded"
        uploads, uploaded_at, created, confirmed = _read_marker(marker)
        waited = self._clock() - uploaded_at
        if dataset is not None:
            try:
                found = self._find(dataset, name, self._layouts(checkpoint_dir, name))
            except StillProcessing:
                if uploads and waited > PROCESSING_WITHIN_SECONDS:
                    raise Rejected(storage_full_reason(self.ref, name, waited / 60)) from None
                raise
            if found is not None:
                self._clear_staging(keep=name)
                return found
        if uploads and not self._failed(dataset, name, created):
            # Sent, neither READY nor FAILED: a new version stays invisible for a while and a
            # first one is listed without Baton's notes while it processes. Never upload twice.
            # A create whose answer was lost or a 500 may have taken effect: wait for it too.
            bound = VISIBLE_WITHIN_SECONDS if dataset is None else PROCESSING_WITHIN_SECONDS
            if waited <= bound:
                raise Pending(f"{name} was uploaded to {self.ref}; not READY yet")
            if confirmed or uploads >= MAX_UPLOADS:
                raise Rejected(storage_full_reason(self.ref, name, waited / 60))
            # Unanswered and still not there after the wait: it never took effect. Send again.
        elif uploads >= MAX_UPLOADS:
            raise Rejected(
                f"Kaggle failed to process {name} in {self.ref} {uploads} times; giving up"
            )
        first_processing = dataset is not None and not any(
            (v.status or "").upper() == READY for v in dataset.versions or []
        )
        if first_processing and not uploads:
            # The job's dataset exists and its first version processes, but Baton has no record
            # of sending it (a create whose answer was lost): adopt it and wait, never upload it
            # again (a new version would be refused with 403 until then anyway).
            adopted = {"uploads": 1, "at": self._clock(), "created": True, "confirmed": True}
            marker.write_text(json.dumps(adopted))
            raise Transient(f"{self.ref} exists and is processing its first version: adopting it")
        # Recorded before it is sent: a create that answers 500 or never answers may still have
        # taken effect (kaggle-api #424), and is then waited for, never sent again at once.
        state = {"uploads": uploads + 1, "at": self._clock(), "created": dataset is None}
        marker.write_text(json.dumps(state | {"confirmed": False}))
        try:
            exists = dataset is not None
            self._upload(folder, name, expect, result, exists=exists, busy=first_processing)
        except DatasetExists:
            # An earlier create of this job's own dataset took effect (its answer was lost):
            # adopt it. Its first version is found by its files once READY, or waited for.
            marker.write_text(json.dumps(state | {"confirmed": True, "created": True}))
            raise
        marker.write_text(json.dumps(state | {"confirmed": True}))
        raise Pending(f"published {name} to {self.ref}; waiting for processing")

    def upload_confirmed(self, name: str) -> bool:
        """Whether Kaggle answered the upload of checkpoint `name` (it then processes it)."""
        uploads, _, _, confirmed = _read_marker(self.staging / f"{name}.uploaded")
        return uploads > 0 and confirmed

    def _failed(self, dataset: ApiDataset | None, name: str, created: bool) -> bool:
        """Whether the newest version carrying `name` ended FAILED or DELETED. A dataset's first
        version has no notes of Baton's: it is ours when Baton created the dataset with it."""
        for version in _newest_first(dataset):
            status = (version.status or "").upper()
            if version.version_notes == version_notes(name):
                return status in _LOST
            if created and version.version_number == 1:
                # READY without the checkpoint's files (`_find` looked): not this checkpoint.
                return status in _LOST or status == READY
        return False

    def _clear_staging(self, keep: str) -> None:
        """Published: what was staged for older checkpoints is no longer needed."""
        for entry in self.staging.iterdir():
            if not entry.name.startswith(keep):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _staged(self, checkpoint_dir: Path, name: str, expect: CheckpointRef) -> Path:
        """The folder to upload, made once, from a checkpoint verified once: the checkpoint's
        files linked under their flat names (no byte written), or its archive."""
        folder = self._folder(name)
        if not folder.is_dir():
            try:
                verify_checkpoint(checkpoint_dir, expect)
            except CorruptCheckpoint as exc:
                raise Rejected(f"the checkpoint to publish is unusable: {exc}") from exc
            self.staging.mkdir(parents=True, exist_ok=True)
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            stage_upload(checkpoint_dir, name, partial)
            partial.replace(folder)
        return folder

    def _folder(self, name: str) -> Path:
        return self.staging / f"{name}.staged"

    def staged_bytes(self, name: str) -> int:
        """The checkpoint's bytes in the upload of `name` (its files, or its archive)."""
        stem = stem_of(name)
        return sum(
            entry.stat().st_size
            for entry in self._folder(name).iterdir()
            if entry.name.startswith(stem)
        )

    def _layouts(self, checkpoint_dir: Path, name: str) -> list[tuple[str, dict[str, int]]]:
        """What a version holding this checkpoint lists, with the name it is published under:
        its flat files, the files Kaggle unpacked from its archive, or (staged here) the
        archive itself."""
        files = checkpoint_files(checkpoint_dir)
        sizes = {path: file.stat().st_size for path, file in files.items()}
        found = listings(stem_of(name), sizes)
        if name.endswith(TAR_SUFFIX):
            archive = self._folder(name) / name
            found.append((name, {name: archive.stat().st_size}))
        return found

    def _find(
        self, dataset: ApiDataset, name: str, layouts: list[tuple[str, dict[str, int]]]
    ) -> PublishedCheckpoint | None:
        """The READY version holding the checkpoint, under the name it was published as (an
        archive, before the flat layout); Transient while one is on its way."""
        names = {version_notes(n): n for n in (stem_of(name), stem_of(name) + TAR_SUFFIX)}
        for version in _newest_first(dataset):
            status = (version.status or "").upper()
            if version.version_notes in names:
                if status == READY:
                    return PublishedCheckpoint(version.version_number, names[version.version_notes])
                if status in _LOST:
                    return None  # uploaded again, a bounded number of times
                raise StillProcessing(
                    f"{self.ref} v{version.version_number} is {status or 'processing'}"
                )
            if status != READY:
                continue  # its files cannot be listed yet, and it may be someone else's
            files = self._files(version.version_number)
            for published, listing in layouts:
                if listing.items() <= files.items():
                    return PublishedCheckpoint(version.version_number, published)
        return None

    def files(self, version: int) -> dict[str, int]:
        """Every file of a READY version, path -> bytes (Kaggle's own listing)."""
        return self._files(version)

    def download_file(self, version: int, name: str, target: Path) -> Path:
        """One file of a version into `target` (a folder); its path there."""
        target.mkdir(parents=True, exist_ok=True)
        self.account.transfer(
            "dataset_download_file",
            lambda api: api.dataset_download_file(
                f"{self.ref}/{version}", name, path=str(target), force=True, quiet=True
            ),
        )
        # kaggle 2.2.5 keeps a nested name's folders under `target`; 2.2.4 wrote its base name.
        for path in (target / name, target / PurePosixPath(name).name):
            if path.is_file():
                return path
        raise Transient(f"downloading {name} from {self.ref} v{version} left no file")

    def _files(self, version: int) -> dict[str, int]:
        files: dict[str, int] = {}
        token = ""
        while True:
            request = ApiListDatasetFilesRequest()
            request.owner_slug, request.dataset_slug = self.owner, self.slug
            request.dataset_version_number, request.page_size = version, _FILES_PAGE
            request.page_token = token
            try:
                page = self.account.call("ListDatasetFiles", _list_files(request))
            except KaggleNotFound:
                return files
            files.update({f.name: f.total_bytes for f in page.dataset_files or []})
            token = page.next_page_token or ""
            if not token:
                return files

    def _upload(
        self,
        folder: Path,
        name: str,
        expect: CheckpointRef,
        result: Path | None,
        *,
        exists: bool,
        busy: bool,
    ) -> None:
        if result is not None:
            shutil.copyfile(result, folder / result_name(expect.segment_index))
        upload_folder(self.account, self.ref, folder, version_notes(name), exists=exists, busy=busy)

    def find_segment(self, segment_index: int) -> int | None:
        """The ready version a self-chaining segment published its checkpoint and result in."""
        dataset = self.account.own_dataset(self.slug)
        if dataset is None:
            return None
        prefix, result = segment_prefix(segment_index), result_name(segment_index)
        for version in _newest_first(dataset):
            status = (version.status or "").upper()
            notes = version.version_notes or ""
            if notes.startswith(version_notes(prefix)) and status != READY:
                if status in _LOST:
                    continue
                raise Pending(f"{self.ref} v{version.version_number} is {status or 'processing'}")
            if status != READY:
                continue
            files = self._files(version.version_number)
            if result in files and any(name.startswith(prefix) for name in files):
                return int(version.version_number)
        return None

    def download_segment(self, version: int, segment_index: int, target: Path) -> None:
        """Unpack a published segment into `target` as `checkpoint/` plus `result.json`."""
        raw = target.parent / f"{target.name}.download"
        shutil.rmtree(raw, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        self.account.transfer(
            "dataset_download_files",
            lambda api: api.dataset_download_files(
                f"{self.ref}/{version}", path=str(raw), force=True, quiet=True, unzip=True
            ),
        )
        target.mkdir(parents=True)
        unpack_version(raw, segment_prefix(segment_index), target / CHECKPOINT_DIR)
        for entry in raw.rglob(result_name(segment_index)):
            entry.replace(target / RESULT_FILE)
        shutil.rmtree(raw, ignore_errors=True)


def upload_folder(
    account: KaggleAccount, ref: str, folder: Path, notes: str, *, exists: bool, busy: bool
) -> None:
    """Send every file of `folder` as the first version of the private dataset `ref`
    (owner/slug) or, where it `exists`, as its next version, through the official client.
    DatasetExists where a create finds it there already, Transient where Kaggle asks to try
    again, Rejected otherwise."""
    metadata = {"id": ref, "title": ref.partition("/")[2], "licenses": [{"name": "CC0-1.0"}]}
    (folder / "dataset-metadata.json").write_text(json.dumps(metadata))
    if exists:
        response = account.transfer(
            "CreateDatasetVersion",
            lambda api: api.dataset_create_version(str(folder), notes, quiet=True),
            busy_403=busy,
        )
    else:
        response = account.transfer(
            "CreateDataset",
            lambda api: api.dataset_create_new(str(folder), public=False, quiet=True),
        )
    error = getattr(response, "error", None)
    if error:
        if not exists and _EXISTS_ERROR.search(error):
            raise DatasetExists(f"{ref} exists already: adopting it ({error})")
        if _TRANSIENT_ERROR.search(error):
            raise Transient(f"publishing to {ref}: {error}")
        raise Rejected(f"Kaggle refused to publish to {ref}: {error}")


def _read_marker(marker: Path) -> tuple[int, float, bool, bool]:
    """How many times the archive was sent, when last, whether the last upload created the
    dataset, and whether Kaggle answered it (0, 0.0, False, False if never)."""
    try:
        value = json.loads(marker.read_text())
        return (
            int(value["uploads"]),
            float(value["at"]),
            bool(value.get("created")),
            bool(value.get("confirmed", True)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return 0, 0.0, False, False


def _newest_first(dataset: ApiDataset | None) -> list[ApiDatasetVersion]:
    versions = dataset.versions or [] if dataset is not None else []
    return sorted(versions, key=lambda v: v.version_number, reverse=True)


def _list_files(
    request: ApiListDatasetFilesRequest,
) -> Callable[[KaggleClient], ApiListDatasetFilesResponse]:
    return lambda client: client.datasets.dataset_api_client.list_dataset_files(request)
