"""Atomic checkpoint commit and verified load.

Layout of a committed checkpoint directory:

    checkpoint/
      trainer.pt          whatever Trainer.write_state wrote (model, optimizer, sampler, ...)
      runtime-rank0.pt    {"step": int, "rng": RngState} written by the runtime, one per rank
      manifest.json       written last; lists every file's sha256 and size

Everything is written into `.checkpoint.tmp-seg<N>-step<S>` next to the target (a name every
rank can derive) and renamed into place only after the manifest is on disk, so a process killed
at any moment leaves either the previous checkpoint or the new one, never a mix.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.boundary.contract import CheckpointRef, fsync_dir
from worker.boundary.manifest import (
    CorruptCheckpoint,
    Manifest,
    read_manifest,
    verify_checkpoint,
    write_manifest,
)
from worker.boundary.paths import CHECKPOINT_DIR
from worker.digest import model_digest
from worker.distributed import RankGroup, SingleProcess
from worker.rng import RngState
from worker.trainer import TRAINER_STATE_FILE, Trainer

TMP_PREFIX = ".checkpoint.tmp-"
OLD_PREFIX = ".checkpoint.old-"


def runtime_state_file(rank: int = 0) -> str:
    return f"runtime-rank{rank}.pt"


@dataclass(frozen=True)
class ResumeState:
    """What a verified checkpoint holds: the trainer's state, the step and the RNG states."""

    trainer: dict[str, Any]
    step: int
    rng: RngState


def commit_checkpoint(
    output_dir: Path,
    trainer: Trainer,
    step: int,
    rng_state: RngState,
    job_id: str,
    segment_index: int,
    group: RankGroup | None = None,
) -> Manifest:
    """Write trainer state, RNG and step to a temp dir, manifest last, then rename into place.

    With several ranks every one of them calls this: each writes its own files into the same
    uncommitted directory, and only after a barrier does rank 0 write the manifest over all of
    them and rename. A rank that dies before the barrier leaves nothing committed.
    """
    import torch

    group = group or SingleProcess()
    main = group.info.is_main
    tmp = _fresh_tmp(output_dir, segment_index, step, group)
    try:
        trainer.write_state(tmp, trainer.state_dict())
        torch.save({"step": step, "rng": rng_state}, tmp / runtime_state_file(group.info.rank))
        # Every rank: gathering sharded weights (ZeRO-3) is itself a collective.
        digest = model_digest(trainer.model_tensors())
        group.barrier()
        manifest: Manifest | None = None
        if main:
            for sub in (p for p in tmp.rglob("*") if p.is_dir()):
                fsync_dir(sub)
            manifest = write_manifest(
                tmp,
                job_id=job_id,
                segment_index=segment_index,
                step=step,
                model_digest=digest,
            )
            _move_into_place(tmp, output_dir / CHECKPOINT_DIR)
        group.barrier()
    except BaseException:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest or _committed_manifest(output_dir)


def recommit_checkpoint(
    source: Path,
    given: Manifest,
    output_dir: Path,
    segment_index: int,
    group: RankGroup | None = None,
) -> Manifest:
    """Commit the verified checkpoint this segment was given again, byte for byte, as its own.

    For a segment that took no step: it has nothing new to save, and some trainers cannot save
    before their first step (the Hugging Face `Trainer` builds its optimizer inside its loop).
    Copying the input works whatever the trainer API, and the next segment's `expect` (this
    segment's index, the same step) finds it.
    """
    group = group or SingleProcess()
    main = group.info.is_main
    tmp = _fresh_tmp(output_dir, segment_index, given.step, group)
    try:
        manifest: Manifest | None = None
        if main:
            for name in given.files:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / name, tmp / name)
            for sub in (p for p in tmp.rglob("*") if p.is_dir()):
                fsync_dir(sub)
            manifest = write_manifest(
                tmp,
                job_id=given.job_id,
                segment_index=segment_index,
                step=given.step,
                model_digest=given.model_digest,
            )
            _move_into_place(tmp, output_dir / CHECKPOINT_DIR)
        group.barrier()
    except BaseException:
        if main:
            remove_leftovers(output_dir)  # only the uncommitted copy: never a valid one
        raise
    return manifest or _committed_manifest(output_dir)


def _fresh_tmp(output_dir: Path, segment_index: int, step: int, group: RankGroup) -> Path:
    """The uncommitted directory every rank writes into, made empty by rank 0."""
    tmp = output_dir / f"{TMP_PREFIX}seg{segment_index}-step{step}"
    if group.info.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
        remove_leftovers(output_dir)
        tmp.mkdir()
    group.barrier()
    return tmp


def _committed_manifest(output_dir: Path) -> Manifest:
    """What rank 0 committed, as the other ranks read it after the last barrier."""
    return read_manifest(output_dir / CHECKPOINT_DIR)


def _move_into_place(tmp: Path, target: Path) -> None:
    # A directory cannot be renamed over a non-empty one, so the old checkpoint steps aside first.
    # A kill between the two renames leaves both complete copies under hidden names and no
    # `checkpoint`: readers see none, never a mix.
    old: Path | None = None
    if target.exists():
        old = target.with_name(OLD_PREFIX + tmp.name.removeprefix(TMP_PREFIX))
        os.rename(target, old)
    os.rename(tmp, target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old)


def remove_leftovers(output_dir: Path) -> None:
    """Delete uncommitted temp dirs left by an interrupted commit; they are never valid."""
    for path in output_dir.iterdir():
        if path.name.startswith((TMP_PREFIX, OLD_PREFIX)) and path.is_dir():
            shutil.rmtree(path)


def read_checkpoint(
    directory: Path,
    manifest: Manifest,
    read_trainer_state: Callable[[Path], dict[str, Any]] | None = None,
    rank: int = 0,
) -> ResumeState:
    """Load a checkpoint that `verify_checkpoint` already accepted, onto the CPU."""
    import torch

    trainer_state = (read_trainer_state or _read_default_trainer_state)(directory)
    runtime = torch.load(
        directory / runtime_state_file(rank), map_location="cpu", weights_only=True
    )
    if int(runtime["step"]) != manifest.step:
        raise CorruptCheckpoint(
            f"runtime state says step {runtime['step']}, manifest says {manifest.step}"
        )
    return ResumeState(trainer=trainer_state, step=manifest.step, rng=runtime["rng"])


def load_checkpoint(
    directory: Path,
    expect: CheckpointRef | None,
    read_trainer_state: Callable[[Path], dict[str, Any]] | None = None,
) -> tuple[ResumeState, Manifest]:
    """Verify hashes and identity first, then load; raises CorruptCheckpoint/StaleCheckpoint."""
    manifest = verify_checkpoint(directory, expect)
    return read_checkpoint(directory, manifest, read_trainer_state), manifest


def _read_default_trainer_state(directory: Path) -> dict[str, Any]:
    import torch

    state: dict[str, Any] = torch.load(
        directory / TRAINER_STATE_FILE, map_location="cpu", weights_only=True
    )
    return state


def state_nbytes(state: Any) -> int:
    """Bytes of tensor data in a nested state dict: the bulk of what a save writes."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, Mapping):
        return sum(state_nbytes(value) for value in state.values())
    if isinstance(state, list | tuple):
        return sum(state_nbytes(value) for value in state)
    return 0
