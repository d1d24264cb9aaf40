import json
import pickle
import random

import numpy as np
import pytest
import torch

from tests.support.trainers import LinearTrainer, make_linear_trainer
from worker import checkpoint
from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import (
    CorruptCheckpoint,
    StaleCheckpoint,
    verify_checkpoint,
    write_manifest,
)
from worker.boundary.paths import CHECKPOINT_DIR, MANIFEST_FILE
from worker.checkpoint import TMP_PREFIX, commit_checkpoint, load_checkpoint
from worker.digest import model_digest
from worker.rng import capture_rng_state, restore_rng_state, seed_everything
from worker.trainer import TRAINER_STATE_FILE

EXPECT = CheckpointRef("job-1", 0, 5)


def trained(steps: int = 5) -> LinearTrainer:
    trainer = make_linear_trainer()
    for step in range(steps):
        trainer.train_step(step)
    return trainer


@pytest.fixture
def committed(tmp_path):
    trainer = trained()
    commit_checkpoint(tmp_path, trainer, 5, capture_rng_state(), "job-1", 0)
    return tmp_path / CHECKPOINT_DIR, trainer


def _draws() -> dict[str, list[float]]:
    """The next few numbers of every RNG a training step can draw from."""
    return {
        "python": [random.random() for _ in range(3)],
        "python-gauss": [random.gauss(0, 1) for _ in range(3)],
        "numpy": np.random.random(3).tolist(),
        "numpy-gauss": np.random.standard_normal(3).tolist(),
        "torch": torch.rand(3).tolist(),
    }


def test_round_trip_restores_state_step_and_every_rng(tmp_path):
    trainer = trained()
    seed_everything(3)
    _draws()  # move every stream away from its seed (numpy's cached gaussian included)
    commit_checkpoint(tmp_path, trainer, 5, capture_rng_state(), "job-1", 0)
    expected = _draws()  # what an uninterrupted run draws next
    seed_everything(99)  # a fresh process: every stream somewhere else
    resume, manifest = load_checkpoint(tmp_path / CHECKPOINT_DIR, EXPECT)
    assert (manifest.job_id, manifest.segment_index, manifest.step) == ("job-1", 0, 5)
    assert resume.step == 5
    restore_rng_state(resume.rng)
    resumed = _draws()
    for stream, values in expected.items():
        assert resumed[stream] == values, f"{stream} RNG not restored"
    assert manifest.model_digest == model_digest(trainer.model_tensors())
    fresh = make_linear_trainer(seed=99)
    fresh.load_state_dict(resume.trainer)
    assert model_digest(fresh.model_tensors()) == manifest.model_digest
    assert fresh.sampler.state_dict() == trainer.sampler.state_dict()
    assert fresh.optimizer.steps == trainer.optimizer.steps > 0  # the learning rate's schedule
    assert len(fresh.optimizer.buffers) == len(trainer.optimizer.buffers) > 0
    for restored, original in zip(fresh.optimizer.buffers, trainer.optimizer.buffers, strict=True):
        assert original.abs().sum() > 0
        assert torch.equal(restored, original)


def test_commit_replaces_the_previous_checkpoint(committed, tmp_path):
    _, trainer = committed
    trainer.train_step(5)
    commit_checkpoint(tmp_path, trainer, 6, capture_rng_state(), "job-1", 1)
    assert verify_checkpoint(tmp_path / CHECKPOINT_DIR).step == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_DIR]


def test_failed_write_leaves_the_previous_checkpoint_and_no_temp_dir(committed, tmp_path):
    _, trainer = committed

    def broken_write(directory, state):
        (directory / "partial.pt").write_bytes(b"half")
        raise OSError("disk full")

    trainer.write_state = broken_write  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk full"):
        commit_checkpoint(tmp_path, trainer, 6, capture_rng_state(), "job-1", 1)
    assert verify_checkpoint(tmp_path / CHECKPOINT_DIR).step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_DIR]


def test_next_commit_removes_leftovers_of_a_killed_one(committed, tmp_path):
    _, trainer = committed
    leftover = tmp_path / f"{TMP_PREFIX}dead"
    leftover.mkdir()
    (leftover / "trainer.pt").write_bytes(b"torn")
    commit_checkpoint(tmp_path, trainer, 5, capture_rng_state(), "job-1", 0)
    assert not leftover.exists()


def test_tampered_file_is_rejected(committed):
    directory, _ = committed
    path = directory / "trainer.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint, match=r"trainer\.pt"):
        load_checkpoint(directory, EXPECT)


def test_missing_manifest_means_no_checkpoint(committed):
    directory, _ = committed
    (directory / MANIFEST_FILE).unlink()
    with pytest.raises(CorruptCheckpoint, match="no manifest"):
        load_checkpoint(directory, EXPECT)


def test_truncated_file_is_rejected(committed):
    directory, _ = committed
    path = directory / "runtime-rank0.pt"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CorruptCheckpoint):
        load_checkpoint(directory, EXPECT)


def test_extra_leftover_file_is_rejected(committed):
    directory, _ = committed
    (directory / "optimizer.pt.partial").write_bytes(b"x")
    with pytest.raises(CorruptCheckpoint, match="extra"):
        load_checkpoint(directory, EXPECT)


def test_missing_directory_is_rejected(tmp_path):
    with pytest.raises(CorruptCheckpoint, match="no checkpoint directory"):
        load_checkpoint(tmp_path / "nope", EXPECT)


def test_garbage_manifest_is_rejected(committed):
    directory, _ = committed
    (directory / MANIFEST_FILE).write_text(json.dumps({"job_id": "job-1"}))
    with pytest.raises(CorruptCheckpoint, match="malformed"):
        load_checkpoint(directory, EXPECT)


@pytest.mark.parametrize(
    "expect",
    [
        CheckpointRef("job-2", 0, 5),
        CheckpointRef("job-1", 1, 5),
        CheckpointRef("job-1", 0, 4),
    ],
    ids=["other-job", "other-segment", "other-step"],
)
def test_stale_checkpoint_is_rejected(committed, expect):
    directory, _ = committed
    # The message is what the segment's error and the job's reason show the user.
    wanted = f"expected {(expect.job_id, expect.segment_index, expect.step)}"
    with pytest.raises(StaleCheckpoint, match="checkpoint is not the expected one") as stale:
        load_checkpoint(directory, expect)
    assert str(stale.value).endswith(wanted)


def test_a_failure_writing_the_manifest_leaves_the_previous_checkpoint(
    committed, tmp_path, monkeypatch
):
    """Commit order: the manifest is written before the rename, so a write that fails while the
    manifest is half on disk leaves the previous commit in place, never a checkpoint directory
    without a whole manifest; and the next commit succeeds."""
    _, trainer = committed

    def failing_write_manifest(directory, **fields):
        (directory / MANIFEST_FILE).write_text('{"job_id": "job-1", "fi')
        raise OSError("disk full")

    trainer.train_step(5)
    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "write_manifest", failing_write_manifest)
        with pytest.raises(OSError, match="disk full"):
            commit_checkpoint(tmp_path, trainer, 6, capture_rng_state(), "job-1", 1)
    assert verify_checkpoint(tmp_path / CHECKPOINT_DIR, EXPECT).step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_DIR]
    commit_checkpoint(tmp_path, trainer, 6, capture_rng_state(), "job-1", 1)
    assert verify_checkpoint(tmp_path / CHECKPOINT_DIR, CheckpointRef("job-1", 1, 6)).step == 6


def _files(directory):
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MANIFEST_FILE
    }


def test_a_segment_without_a_step_commits_its_input_again_byte_for_byte_as_its_own(
    committed, tmp_path
):
    """A segment that took no step re-commits the checkpoint it was given, unchanged, under its
    own index: the next segment's `expect` (this index, the same step) finds and loads it."""
    source, trainer = committed
    given = verify_checkpoint(source, EXPECT)
    output = tmp_path / "segment-1"
    output.mkdir()
    manifest = checkpoint.recommit_checkpoint(source, given, output, 1)
    assert (manifest.job_id, manifest.segment_index, manifest.step) == ("job-1", 1, 5)
    assert manifest.model_digest == given.model_digest
    assert manifest.files == given.files
    assert _files(output / CHECKPOINT_DIR) == _files(source)
    assert sorted(p.name for p in output.iterdir()) == [CHECKPOINT_DIR]
    resume, loaded = load_checkpoint(output / CHECKPOINT_DIR, CheckpointRef("job-1", 1, 5))
    assert (loaded, resume.step) == (manifest, 5)
    fresh = make_linear_trainer(seed=99)
    fresh.load_state_dict(resume.trainer)
    assert model_digest(fresh.model_tensors()) == model_digest(trainer.model_tensors())


def test_a_failed_recommit_leaves_the_previous_checkpoint_and_no_temp_dir(committed, tmp_path):
    source, trainer = committed
    given = verify_checkpoint(source, EXPECT)
    output = tmp_path / "segment-1"
    output.mkdir()
    trainer.train_step(5)
    commit_checkpoint(output, trainer, 6, capture_rng_state(), "job-1", 1)
    (source / sorted(given.files)[-1]).unlink()  # the input vanished under the copy
    with pytest.raises(FileNotFoundError):
        checkpoint.recommit_checkpoint(source, given, output, 2)
    assert verify_checkpoint(output / CHECKPOINT_DIR, CheckpointRef("job-1", 1, 6)).step == 6
    assert sorted(p.name for p in output.iterdir()) == [CHECKPOINT_DIR]


def test_the_state_size_counts_every_tensor_byte_however_nested():
    state = {
        "weights": torch.zeros(10, dtype=torch.float32),  # 40 bytes
        "optimizer": [torch.zeros(3, dtype=torch.float64), (torch.zeros(2, dtype=torch.int8),)],
        "step": 5,
        "name": "not a tensor",
    }
    assert checkpoint.state_nbytes(state) == 40 + 24 + 2
    assert checkpoint.state_nbytes(torch.zeros(4, 4)) == 64
    assert checkpoint.state_nbytes(None) == 0


def _rewrite(directory, name, state):
    """Replace one file of a committed checkpoint and sign it again, as a writer with access to
    the checkpoint could: the manifest then verifies, and only loading can refuse it."""
    old = verify_checkpoint(directory)
    torch.save(state, directory / name)
    write_manifest(
        directory,
        job_id=old.job_id,
        segment_index=old.segment_index,
        step=old.step,
        model_digest=old.model_digest,
    )


def test_a_runtime_state_that_disagrees_with_its_manifest_is_rejected(committed):
    directory, _ = committed
    _rewrite(directory, checkpoint.runtime_state_file(), {"step": 6, "rng": capture_rng_state()})
    with pytest.raises(CorruptCheckpoint, match="runtime state says step 6, manifest says 5"):
        load_checkpoint(directory, EXPECT)


class _RunsCode:
    """Unpickling this opens (creates) a file: code run by loading a checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("name", ["runtime", "trainer"])
def test_a_checkpoint_holding_pickled_code_is_refused_and_never_runs_it(committed, tmp_path, name):
    directory, trainer = committed
    marker = tmp_path / "code-ran"
    if name == "runtime":
        state = {"step": 5, "rng": _RunsCode(marker)}
        _rewrite(directory, checkpoint.runtime_state_file(), state)
    else:
        _rewrite(directory, TRAINER_STATE_FILE, {**trainer.state_dict(), "x": _RunsCode(marker)})
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(directory, EXPECT)
    assert not marker.exists()


def test_a_trainer_s_own_state_reader_is_what_a_load_hands_back(committed):
    directory, _ = committed
    seen = []

    def read_state(where):
        seen.append(where)
        return {"from": "the trainer's reader"}

    resume, _ = load_checkpoint(directory, EXPECT, read_state)
    assert resume.trainer == {"from": "the trainer's reader"}
    assert seen == [directory]


def test_a_recommit_keeps_a_checkpoint_s_nested_folders(tmp_path):
    """Some trainers lay their state out folders deep: the re-commit copies it as it was."""
    trainer = trained()

    def write_nested(directory, state):
        (directory / "model" / "shard-0").mkdir(parents=True)
        torch.save(state, directory / "model" / "shard-0" / "state.pt")

    trainer.write_state = write_nested  # type: ignore[method-assign]
    source_dir = tmp_path / "segment-0"
    source_dir.mkdir()
    given = commit_checkpoint(source_dir, trainer, 5, capture_rng_state(), "job-1", 0)
    output = tmp_path / "segment-1"
    output.mkdir()
    manifest = checkpoint.recommit_checkpoint(source_dir / CHECKPOINT_DIR, given, output, 1)
    assert "model/shard-0/state.pt" in manifest.files
    assert _files(output / CHECKPOINT_DIR) == _files(source_dir / CHECKPOINT_DIR)
