"""Checking a checkpoint a session published itself, without downloading it.

What the orchestrator reads (small metadata only):

1. the manifest, from the session's output (`checkpoint/manifest.json`, a few KB): it must name
   the expected job, segment and step, and its sha256 must be the one the published name
   carries (`checkpoint-sNNNNN-stepS-<manifest sha256[:12]>`), so what was published was made
   from this very manifest;
2. the dataset version, through GetDataset: READY (never FAILED or still processing), and
   carrying this segment's result;
3. Kaggle's own listing of the version (ListDatasetFiles): where the checkpoint's files lie in
   it (flat, as sessions publish them, or unpacked from an archive; worker/boundary/
   version_layout.py), every file the manifest lists, the manifest too, with exactly the
   manifest's size and nothing missing; where it is one archive (a checkpoint of too many
   files, or one published before the flat layout), the archive's exact size;
4. a sample: up to `SAMPLE_FILES` files, each at most `SAMPLE_MAX_BYTES`, chosen at random
   (seeded by the manifest, so a retry checks the same ones), downloaded and hashed.

Why not hash everything here: that needs every byte on this machine, which is what the
transport avoids. The full hash check happens anyway, in the next session, which has the bytes
mounted: the worker verifies every file against the manifest before it trusts the checkpoint,
and rejects it by name otherwise (a rejected checkpoint is never offered again). So a corrupt
copy costs at most one short session; the checks above make even that unlikely, catching a
wrong, truncated, stale or half-processed version for a few KB. Each size is Kaggle's record
of the bytes it stored, independent of the session that wrote them.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import tempfile
import time
from pathlib import Path

from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Pending
from worker.boundary.manifest import CorruptCheckpoint, FileEntry, read_manifest, sha256_file
from worker.boundary.paths import MANIFEST_FILE
from worker.boundary.transport import Published, RemoteCopy
from worker.boundary.version_layout import (
    TAR_SUFFIX,
    checkpoint_stem,
    listed_name,
    listing_layout,
    stem_of,
)
from worker.kaggle_access.checkpoints import (
    PROCESSING_WITHIN_SECONDS,
    VISIBLE_WITHIN_SECONDS,
    CheckpointDataset,
)

SAMPLE_FILES = 3
SAMPLE_MAX_BYTES = 64 << 10


def check_published(
    dataset: CheckpointDataset,
    published: Published,
    checkpoint: Path,
    expect: CheckpointRef,
    scratch: Path,
) -> tuple[RemoteCopy, int]:
    """The published copy, once it checks out, and the bytes the sample downloaded;
    CorruptCheckpoint when it does not, Transient while Kaggle processes it."""
    manifest = read_manifest(checkpoint)
    manifest.check_expected(expect)
    stem = checkpoint_stem(expect, checkpoint)
    if stem_of(published.archive) != stem:
        raise CorruptCheckpoint(
            f"the published checkpoint {published.archive} was not made from this manifest"
        )
    # Beside the scratch folder, not in it: every fetch of the output empties that folder.
    since = scratch.parent / f".{scratch.name}.published-since"
    version = dataset.find_segment(expect.segment_index)
    if version is None:
        _wait_for_version(dataset, since, expect.segment_index)
        raise CorruptCheckpoint(
            f"no READY version of {dataset.ref} holds segment {expect.segment_index}"
        )
    since.unlink(missing_ok=True)
    files = dataset.files(version)
    layout = listing_layout(published.archive, set(files))
    sampled = 0
    if layout == "archive":
        archive = stem + TAR_SUFFIX
        if archive != published.archive or files[archive] != published.archive_bytes:
            raise CorruptCheckpoint(
                f"{dataset.ref} v{version} holds {files[archive]} bytes of {archive}, not "
                f"{published.archive_bytes} of {published.archive}"
            )
    else:
        layout = layout or "flat"
        manifest_size = (checkpoint / MANIFEST_FILE).stat().st_size
        expected = {name: entry.bytes for name, entry in manifest.files.items()}
        expected[MANIFEST_FILE] = manifest_size
        listed = {name: files.get(listed_name(stem, name, layout)) for name in expected}
        wrong = sorted(name for name, size in listed.items() if size != expected[name])
        if wrong:
            raise CorruptCheckpoint(
                f"{dataset.ref} v{version} does not hold the checkpoint's files as its manifest "
                f"lists them: {', '.join(wrong[:5])}"
            )
        sampled = _sample(dataset, version, stem, layout, manifest.files, checkpoint, scratch)
    manifest_sha = hashlib.sha256((checkpoint / MANIFEST_FILE).read_bytes()).hexdigest()
    return RemoteCopy(dataset.ref, version, published.archive, manifest_sha), sampled


def _wait_for_version(dataset: CheckpointDataset, since_file: Path, segment_index: int) -> None:
    """Transient while the version may still appear: a new dataset 404s for a while and its
    first version is listed without files until READY. Past VISIBLE_WITHIN_SECONDS plus
    PROCESSING_WITHIN_SECONDS from the first look it never will (Kaggle drops uploads past
    the storage limit silently, kaggle-api #284): the caller then takes the output's copy."""
    now = time.time()
    try:
        since = float(since_file.read_text())
    except (OSError, ValueError):
        since_file.parent.mkdir(parents=True, exist_ok=True)
        since_file.write_text(repr(now))
        since = now
    if now - since < VISIBLE_WITHIN_SECONDS + PROCESSING_WITHIN_SECONDS:
        raise Pending(
            f"{dataset.ref} has no READY version with segment {segment_index} yet; "
            f"waiting for Kaggle to process it ({now - since:.0f} s so far)"
        )


def _sample(
    dataset: CheckpointDataset,
    version: int,
    stem: str,
    layout: str,
    entries: dict[str, FileEntry],
    checkpoint: Path,
    scratch: Path,
) -> int:
    small = sorted(name for name, entry in entries.items() if entry.bytes <= SAMPLE_MAX_BYTES)
    seed = sha256_file(checkpoint / MANIFEST_FILE)
    chosen = random.Random(seed).sample(small, min(SAMPLE_FILES, len(small)))
    folder = Path(tempfile.mkdtemp(prefix="sample-", dir=scratch))
    fetched = 0
    try:
        for name in chosen:
            listed = listed_name(stem, name, layout)
            path = dataset.download_file(version, listed, folder / str(len(name)))
            fetched += path.stat().st_size
            if sha256_file(path) != entries[name].sha256:
                raise CorruptCheckpoint(f"{name} in {dataset.ref} v{version} fails its hash")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return fetched
