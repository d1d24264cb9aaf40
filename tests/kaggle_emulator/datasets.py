"""Datasets and their versions: created from uploaded blobs, processed after a delay, zipped.

Kaggle's observable timing is kept: a brand-new version 404s for `not_found_seconds`, goes through
DatabundleVersionStatus's processing stages for `processing_seconds`, then ends READY (or FAILED,
DELETED, REPROCESSING where `Faults.dataset_outcomes` says so), and a new version is refused with
403 only while the dataset's first version is still processing (kagglehub PR #182). Uploaded
.zip/.tar archives are unpacked into a folder named after the archive when `unpack_archives`
is set, the way Kaggle decompresses them.

A private version that would take its owner past `private_storage_bytes` is accepted ("Ok", no
error) and then never finishes: a dataset's first version never becomes visible (404, kaggle-api
#284), a later one stays NOT_YET_PERSISTED (#424). Kaggle keeps the reason on its side ("The size
of your files is N bytes, it exceeds the maximum of M"); no API call returns it.
"""

from __future__ import annotations

import math
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.kaggle_emulator.blobs import Blob
from tests.kaggle_emulator.errors import ApiError, forbidden, not_found

_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_FILES_PER_VERSION = 1000
# kagglesdk's DatabundleVersionStatus, in the order a version goes through them.
PROCESSING_STAGES = (
    "NOT_YET_PERSISTED",
    "BLOBS_RECEIVED",
    "BLOBS_DECOMPRESSED",
    "BLOBS_COPIED_TO_SDS",
    "INDIVIDUAL_BLOBS_COMPRESSED",
)
OUTCOMES = ("READY", "FAILED", "DELETED", "REPROCESSING")


@dataclass(frozen=True)
class DatasetTiming:
    processing_seconds: float
    not_found_seconds: float
    # Processing also takes size / this (Kaggle copies, decompresses and indexes every byte);
    # None: a fixed `processing_seconds` whatever the size.
    bytes_per_second: float | None = None

    def processing(self, size: int) -> float:
        rate = self.bytes_per_second
        return self.processing_seconds + (size / rate if rate else 0.0)


@dataclass
class DatasetVersion:
    number: int
    created_at: float
    visible_at: float
    ready_at: float
    notes: str | None
    directory: Path
    archive: Path

    def visible(self, now: float) -> bool:
        return now >= self.visible_at

    # What processing ends in: READY, or FAILED / DELETED / REPROCESSING when a test says so.
    outcome: str = "READY"
    # Why Kaggle silently never finishes this version (the private storage limit), if it does not.
    stuck: str | None = None

    def ready(self, now: float) -> bool:
        return self.outcome == "READY" and now >= self.ready_at

    def status(self, now: float) -> str:
        """A DatabundleVersionStatus name: the processing stages in turn, then the outcome."""
        if now >= self.ready_at:
            return self.outcome
        span = max(self.ready_at - self.created_at, 1e-9)
        stage = int((now - self.created_at) / span * len(PROCESSING_STAGES))
        return PROCESSING_STAGES[min(max(stage, 0), len(PROCESSING_STAGES) - 1)]

    def zipped(self) -> Path:
        """The version as one .zip (what a whole-version download serves), made once."""
        if not self.archive.exists():
            tmp = self.archive.with_name(self.archive.name + ".tmp")
            _zip_directory(self.directory, tmp)
            tmp.replace(self.archive)
        return self.archive

    def files(self) -> list[tuple[str, int]]:
        """(posix path relative to the version, size) for every file, sorted."""
        found = []
        for path in sorted(self.directory.rglob("*")):
            if path.is_file():
                found.append((path.relative_to(self.directory).as_posix(), path.stat().st_size))
        return found


@dataclass
class Dataset:
    id: int
    owner: str
    slug: str
    title: str
    is_private: bool
    license_name: str | None
    subtitle: str | None
    description: str | None
    versions: list[DatasetVersion] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

    def visible_versions(self, now: float) -> list[DatasetVersion]:
        return [v for v in self.versions if v.visible(now)]

    def stored_bytes(self) -> int:
        """What the dataset's versions take of its owner's storage (stuck ones take nothing)."""
        return sum(size for v in self.versions if v.stuck is None for _, size in v.files())

    def latest_ready(self, now: float) -> DatasetVersion | None:
        ready = [v for v in self.versions if v.ready(now) and v.visible(now)]
        return ready[-1] if ready else None


class DatasetExistsError(Exception):
    pass


class TooManyFiles(Exception):
    """A version of more files than Kaggle keeps in one; Kaggle's text, in the response's
    `error` (the CLI prints "Dataset version creation error: The file count exceeds the maximum
    of 1000", whirlwide/candlestick_retriever #15)."""

    def __init__(self) -> None:
        super().__init__(f"The file count exceeds the maximum of {MAX_FILES_PER_VERSION}")


class DatasetRegistry:
    """All datasets; the caller holds the emulator's lock."""

    def __init__(
        self,
        root: Path,
        timing: DatasetTiming,
        unpack_archives: bool,
        outcomes: Callable[[], str] = lambda: "READY",
        private_storage_bytes: int | None = None,
    ) -> None:
        self._outcomes = outcomes
        self.private_storage_bytes = private_storage_bytes
        self._root = root
        self._timing = timing
        self._unpack = unpack_archives
        self._datasets: dict[str, Dataset] = {}
        self._next_id = 1
        # The most private dataset versions each owner ever held at once, and the most bytes.
        self.peak_private_versions: dict[str, int] = {}
        self.peak_private_bytes: dict[str, int] = {}

    def delete(self, ref: str) -> None:
        self._datasets.pop(ref, None)

    def all(self) -> list[Dataset]:
        return list(self._datasets.values())

    def create(self, dataset: Dataset, blobs: list[Blob], now: float) -> DatasetVersion:
        if dataset.ref in self._datasets:
            raise DatasetExistsError(dataset.ref)
        dataset.id = self._next_id
        self._next_id += 1
        version = self._store_version(dataset, blobs, None, now)
        self._datasets[dataset.ref] = dataset
        return version

    def add_version(
        self, owner: str, slug: str, viewer: str, blobs: list[Blob], notes: str | None, now: float
    ) -> DatasetVersion:
        dataset = self.get(owner, slug, viewer, now)
        if dataset.owner != viewer:
            raise forbidden(f"Permission 'datasets.update' was denied for {dataset.ref}")
        first = dataset.versions[0]
        if now < first.ready_at and not any(version.ready(now) for version in dataset.versions):
            # Only while the FIRST version processes (kagglehub PR #182); later versions may
            # be created while others process.
            raise forbidden(
                f"Dataset {dataset.ref} is still processing version "
                f"{dataset.versions[-1].number}; wait until it is ready"
            )
        return self._store_version(dataset, blobs, notes, now)

    def get(self, owner: str, slug: str, viewer: str, now: float) -> Dataset:
        dataset = self._datasets.get(f"{owner}/{slug}")
        if dataset is None or not dataset.visible_versions(now):
            raise not_found(f"Dataset {owner}/{slug}")
        if dataset.is_private and dataset.owner != viewer:
            raise not_found(f"Dataset {owner}/{slug}")
        return dataset

    def version(
        self, owner: str, slug: str, number: int | None, viewer: str, now: float
    ) -> DatasetVersion:
        """A ready version: the given one, or the latest ready one."""
        dataset = self.get(owner, slug, viewer, now)
        if number is None:
            latest = dataset.latest_ready(now)
            if latest is None:
                raise ApiError(404, f"Dataset {dataset.ref} has no ready version yet")
            return latest
        for version in dataset.visible_versions(now):
            if version.number == number:
                if not version.ready(now):
                    raise ApiError(404, f"Version {number} of {dataset.ref} is still processing")
                return version
        raise not_found(f"Version {number} of dataset {dataset.ref}")

    def _store_version(
        self, dataset: Dataset, blobs: list[Blob], notes: str | None, now: float
    ) -> DatasetVersion:
        number = len(dataset.versions) + 1
        base = self._root / dataset.owner / dataset.slug
        directory = base / str(number)
        directory.mkdir(parents=True)
        for blob in blobs:
            self._place(blob, directory)
        if sum(1 for p in directory.rglob("*") if p.is_file()) > MAX_FILES_PER_VERSION:
            shutil.rmtree(directory)
            raise TooManyFiles
        # Zipped on the first whole-version download (`zipped`), not here: most versions Baton
        # writes are only ever mounted, and deflating gigabytes on every upload is slow.
        archive = base / f"{number}.zip"
        version = DatasetVersion(
            number=number,
            created_at=now,
            visible_at=now + self._timing.not_found_seconds,
            ready_at=now
            + self._timing.processing(
                sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
            ),
            notes=notes,
            directory=directory,
            archive=archive,
            outcome=self._outcomes(),
        )
        self._enforce_private_storage(dataset, version)
        dataset.versions.append(version)
        self._note_peak(dataset)
        return version

    def _note_peak(self, dataset: Dataset) -> None:
        if not dataset.is_private:
            return
        held = [d for d in self._datasets.values() if d.owner == dataset.owner and d.is_private]
        if dataset not in held:
            held.append(dataset)
        owner = dataset.owner
        versions = sum(len(d.versions) for d in held)
        stored = sum(d.stored_bytes() for d in held)
        self.peak_private_versions[owner] = max(self.peak_private_versions.get(owner, 0), versions)
        self.peak_private_bytes[owner] = max(self.peak_private_bytes.get(owner, 0), stored)

    def _enforce_private_storage(self, dataset: Dataset, version: DatasetVersion) -> None:
        """Past the owner's private storage, the version is accepted and never finishes."""
        limit = self.private_storage_bytes
        if limit is None or not dataset.is_private:
            return
        used = sum(
            d.stored_bytes()
            for d in self._datasets.values()
            if d.owner == dataset.owner and d.is_private
        )
        size = sum(size for _, size in version.files())
        if used + size <= limit:
            return
        left = max(0, limit - used)
        version.stuck = f"The size of your files is {size} bytes, it exceeds the maximum of {left}"
        version.ready_at = math.inf
        if not dataset.versions:
            version.visible_at = math.inf

    def _place(self, blob: Blob, directory: Path) -> None:
        suffix = next((s for s in _ARCHIVE_SUFFIXES if blob.name.endswith(s)), None)
        if self._unpack and suffix is not None:
            target = directory / blob.name[: -len(suffix)]
            if suffix == ".zip":
                with zipfile.ZipFile(blob.path) as archive:
                    archive.extractall(target)  # zipfile strips absolute and ".." parts
            else:
                with tarfile.open(blob.path) as archive:
                    archive.extractall(target, filter="data")
        else:
            shutil.copyfile(blob.path, directory / blob.name)


def _zip_directory(directory: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, _dirs, files in os.walk(directory):
            for name in sorted(files):
                path = Path(root) / name
                zf.write(path, path.relative_to(directory).as_posix())
