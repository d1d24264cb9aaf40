"""The Kaggle backend's checkpoint datasets against the emulator, through the official client: a
resumed segment mounts its predecessor's checkpoint pinned (where it was published, by the
orchestrator or by the session itself), only the newest `keep_versions` checkpoint datasets stay
on the account, a finished job leaves none, and a stored checkpoint whose record is unusable is
never pushed."""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import pytest

from orchestrator.backends.base import Collected, LaunchRequest, Rejected, Transient
from orchestrator.backends.kaggle.backend import (
    KaggleBackend,
    KaggleHandle,
    checkpoint_slug,
    dataset_slug,
    kernel_slug,
)
from orchestrator.backends.kaggle.findings import AccountFindings
from orchestrator.spec import KaggleSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import (
    account_on,
    committed_checkpoint,
    embedded_options,
    publish_until_settled,
    script_leaving,
)
from worker.boundary.contract import CheckpointRef, Outcome, SegmentResult, SegmentSpec
from worker.boundary.manifest import sha256_file, verify_checkpoint, write_manifest
from worker.boundary.paths import CHECKPOINT_DIR, MANIFEST_FILE, RESULT_FILE
from worker.boundary.transport import (
    KERNEL,
    ORCHESTRATOR,
    PUBLISH_FILE,
    REMOTE_FILE,
    Published,
    RemoteCopy,
    read_remote,
    verify_stored,
    write_stub,
)
from worker.kaggle_access.checkpoints import CheckpointDataset, PublishedCheckpoint
from worker.kaggle_access.kernels import JobKernel, KernelPush

JOB = "j1"
TRAINER = "trainers.tiny_lm:TinyCharLM"
STEPS_PER_SEGMENT = 10
CPU_PUSH = KernelPush(None, 60, False, True, [], [], [], None)


def _backend(
    emulator: Emulator, tmp_path: Path, keep_versions: int, **kaggle: object
) -> KaggleBackend:
    # A T4 job on an emulator that withholds the GPU: every session it launches fails at once
    # (the worker's accelerator check), so no test waits on training.
    kaggle |= {"keep_versions": keep_versions, "accelerator": "t4x2"}
    options = KaggleSpec.model_validate(kaggle_spec(kaggle)["kaggle"])
    return KaggleBackend(account_on(emulator), JOB, options, tmp_path / "kaggle" / JOB)


def _expect(segment_index: int) -> CheckpointRef:
    return CheckpointRef(JOB, segment_index, (segment_index + 1) * STEPS_PER_SEGMENT)


def _resume(backend: KaggleBackend, tmp_path: Path, segment_index: int) -> KaggleHandle:
    """Launch `segment_index` from its predecessor's stored checkpoint as the engine does: ask
    again on every Transient (a dataset still processing, the session cap) until it is pushed;
    the handle the launch answered."""
    expect = _expect(segment_index - 1)
    store = tmp_path / "store" / f"{expect.segment_index:05d}"
    if not store.exists():
        committed_checkpoint(store, expect, {"model.bin": bytes([segment_index]) * 4096})
    segment = SegmentSpec(
        JOB, segment_index, TRAINER, {}, 100, 60.0, resume_path="input", expect=expect
    )
    request = LaunchRequest(f"{JOB}-{segment_index:05d}", segment, store)
    deadline = time.monotonic() + 60
    while True:
        try:
            return KaggleHandle.decode(backend.launch(request))
        except Transient:
            assert time.monotonic() < deadline, f"segment {segment_index} was never pushed"
            time.sleep(0.1)


def _checkpoint_datasets(emulator: Emulator) -> list[str]:
    with emulator.state.lock:
        slugs = [d.slug for d in emulator.state.datasets.all()]
    return sorted(s for s in slugs if s.startswith(dataset_slug(JOB)))


def _final_output(
    made: Path,
    segment_index: int,
    outcome: str = "completed",
    model: bytes = bytes(range(256)) * 16,
) -> Path:
    """What the job's last segment leaves in `made` (or, with another `outcome`, any segment
    that committed): its checkpoint (returned, its weights `model`) and its result."""
    expect = _expect(segment_index)
    checkpoint = made / CHECKPOINT_DIR
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.bin").write_bytes(model)
    digest = "f" * 64
    write_manifest(
        checkpoint, job_id=JOB, segment_index=segment_index, step=expect.step, model_digest=digest
    )
    start = expect.step - STEPS_PER_SEGMENT
    result = SegmentResult(JOB, segment_index, outcome, start, expect.step, 60, model_digest=digest)
    result.write(made / RESULT_FILE)
    return checkpoint


def _completing_script(tmp_path: Path, segment_index: int) -> str:
    """A kernel that leaves what `_final_output` made under `tmp_path / "made"` (made now unless
    made already, with anything added there: a publish.json)."""
    made = tmp_path / "made"
    if not (made / RESULT_FILE).exists():
        _final_output(made, segment_index)
    return script_leaving(made)


def test_a_job_keeps_its_newest_checkpoint_datasets_and_once_finished_none(
    tmp_path: Path,
) -> None:
    """Segments 1 to 3 each resume from their predecessor's checkpoint, published to a dataset of
    its own and mounted at the version published; with `keep_versions: 2` the oldest is deleted
    as the third is mounted. The last segment completes: its checkpoint is stored, verified, and
    the job leaves no dataset on the account."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2)
        held: list[list[str]] = []
        for segment_index in (1, 2, 3):
            _resume(backend, tmp_path, segment_index)
            held.append(_checkpoint_datasets(emulator))
        kernel = JobKernel(backend.account, kernel_slug(JOB))
        mounted = [[m.source.as_posix() for m in s.mounts] for s in emulator.sessions(kernel.ref)]
        assert emulator.push_counts == {kernel.ref: 3}

        pushed = kernel.push(_completing_script(tmp_path, 4), CPU_PUSH)
        deadline = time.monotonic() + 120  # a hang guard
        while emulator.sessions(kernel.ref)[-1].status is not WorkerStatus.COMPLETE:
            assert time.monotonic() < deadline, emulator.sessions(kernel.ref)
            time.sleep(0.05)
        handle = KaggleHandle(kernel.ref, 4, pushed.version, JOB, 60.0, 40).encode()
        store = tmp_path / "store" / "00004"
        collected = backend.collect(handle, store)
        left = _checkpoint_datasets(emulator)
        assert emulator.internal_errors == []

    slug = dataset_slug(JOB)
    assert held == [[f"{slug}-s0"], [f"{slug}-s0", f"{slug}-s1"], [f"{slug}-s1", f"{slug}-s2"]]
    for index, sources in enumerate(mounted):
        assert any(s.endswith(f"/alice/{slug}-s{index}/1") for s in sources), sources
    assert collected.problem is None
    assert collected.result is not None
    assert (collected.result.outcome, collected.result.end_step) == (Outcome.COMPLETED, 50)
    assert collected.checkpoint == store
    assert verify_checkpoint(store, _expect(4)).step == 50
    assert left == []


def test_a_stored_checkpoint_whose_remote_record_is_unusable_is_refused_and_nothing_is_pushed(
    tmp_path: Path,
) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2)
        store = committed_checkpoint(tmp_path / "store" / "00000", _expect(0))
        (store / REMOTE_FILE).write_text('{"dataset_ref": "alice/baton-ckpt-j1"}')
        segment = SegmentSpec(
            JOB, 1, TRAINER, {}, 100, 60.0, resume_path="input", expect=_expect(0)
        )
        with pytest.raises(
            Rejected, match=f"the stored checkpoint's record is unusable.*{REMOTE_FILE}"
        ):
            backend.launch(LaunchRequest(f"{JOB}-00001", segment, store))
        assert emulator.calls("SaveKernel") == []
        assert emulator.calls("CreateDataset") == []


def test_a_checkpoint_its_session_published_is_mounted_where_it_lies_never_uploaded_again(
    tmp_path: Path,
) -> None:
    """Segment 0's session published its checkpoint itself; the store holds a stub naming that
    version. Segment 1 mounts that very version and nothing is uploaded a second time."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2)
        expect = _expect(0)
        made = committed_checkpoint(tmp_path / "session" / CHECKPOINT_DIR, expect)
        slug = checkpoint_slug(JOB, 0)
        own = CheckpointDataset(backend.account, slug, tmp_path / "session" / "publish")
        published = publish_until_settled(own, made, expect=expect)
        assert isinstance(published, PublishedCheckpoint), published
        manifest = made / MANIFEST_FILE
        copy = RemoteCopy(
            f"alice/{slug}", published.version, published.file_name, sha256_file(manifest)
        )
        write_stub(tmp_path / "store" / "00000", manifest, copy)
        uploads = len(emulator.calls("CreateDataset")) + len(emulator.calls("CreateDatasetVersion"))
        assert uploads == 1

        _resume(backend, tmp_path, 1)
        [session] = emulator.sessions(f"alice/{kernel_slug(JOB)}")
        sources = [m.source.as_posix() for m in session.mounts]
        told = re.search(r"^OPTIONS = json\.loads\((.+)\)$", session.script, re.MULTILINE)
        again = len(emulator.calls("CreateDataset")) + len(emulator.calls("CreateDatasetVersion"))
    assert any(s.endswith(f"/alice/{slug}/{published.version}") for s in sources), sources
    # ...and the session is told which checkpoint of that version to read.
    assert told is not None
    assert json.loads(ast.literal_eval(told.group(1)))["checkpoint_file"] == published.file_name
    assert again == uploads


def test_a_final_checkpoint_its_session_published_is_fetched_verified_and_its_dataset_deleted(
    tmp_path: Path,
) -> None:
    """The job's last session published its checkpoint itself, to a dataset of its own: collect
    checks that copy, holds it whole and verified in the store, and deletes that dataset too."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2, enable_internet=True)
        assert backend.options.kernel_transport
        handle, _ = _published_and_ended(emulator, backend, tmp_path, 4, "completed")
        assert _checkpoint_datasets(emulator) == [checkpoint_slug(JOB, 4)]
        store = tmp_path / "store" / "00004"
        collected = _collected(backend, handle, store)
        left = _checkpoint_datasets(emulator)
        assert emulator.internal_errors == []
    checkpoint = tmp_path / "made" / CHECKPOINT_DIR
    size = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    expect = _expect(4)
    assert collected.problem is None, collected.problem
    assert collected.result is not None
    assert collected.result.outcome == Outcome.COMPLETED
    assert collected.transport == KERNEL
    assert collected.result.timings.upload == 2.5  # the session's publishing counts as upload
    assert collected.checkpoint == store
    assert not (store / REMOTE_FILE).exists()  # held here, not a stub
    assert (collected.link_bytes or 0) >= size  # the final model crossed the link, whole
    assert verify_checkpoint(store, expect).step == 50
    assert left == []


def test_an_account_that_refuses_pinned_versions_gets_each_checkpoint_named_unpinned_after_once(
    tmp_path: Path,
) -> None:
    """Kaggle will not mount `owner/slug/N` for this account: the first resumed segment's push
    is answered with its checkpoint left out, which the backend records, never a refusal of the
    job (that session's worker rejects the missing checkpoint at once); from then on each
    segment names its checkpoint's own dataset unpinned, which holds that one checkpoint, and
    mounts it. Each handle says the step its segment starts from."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"}), "pinned_sources": False}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2)
        first = _resume(backend, tmp_path, 1)
        # Recorded for the account: `baton kaggle check` and its other jobs read it there.
        refused = AccountFindings.for_account(tmp_path / "kaggle", "alice").load().pinned_sources
        second = _resume(backend, tmp_path, 2)
        sessions = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    assert refused is False
    assert [(h.segment_index, h.version, h.start_step) for h in (first, second)] == [
        (1, 1, _expect(0).step),
        (2, 2, _expect(1).step),
    ]
    mounted = [[m.source.as_posix() for m in s.mounts] for s in sessions]
    assert not any(checkpoint_slug(JOB, 0) in source for source in mounted[0]), mounted
    assert any(f"/alice/{checkpoint_slug(JOB, 1)}/" in source for source in mounted[1]), mounted
    told = [embedded_options(s.script) for s in sessions]
    assert [o.checkpoint_dataset for o in told] == [
        checkpoint_slug(JOB, 0),
        checkpoint_slug(JOB, 1),
    ]
    assert all(o.checkpoint_file for o in told), told


def test_a_job_that_keeps_every_checkpoint_publishes_each_as_a_version_of_its_one_dataset(
    tmp_path: Path,
) -> None:
    """`keep_versions: 0` keeps them all: each checkpoint is a new version of the job's one
    dataset (the client deletes datasets, never versions), each segment mounts its own version,
    and nothing is deleted."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=0)
        for segment_index in (1, 2):
            _resume(backend, tmp_path, segment_index)
        sessions = emulator.sessions(f"alice/{kernel_slug(JOB)}")
        datasets = _checkpoint_datasets(emulator)
    assert datasets == [dataset_slug(JOB)]
    assert emulator.calls("DeleteDataset") == []
    for version, session in enumerate(sessions, start=1):
        sources = [m.source.as_posix() for m in session.mounts]
        assert any(s.endswith(f"/alice/{dataset_slug(JOB)}/{version}") for s in sources), sources
        assert embedded_options(session.script).checkpoint_dataset == dataset_slug(JOB)


def test_a_checkpoint_its_session_published_is_kept_as_a_stub_and_never_crosses_the_link(
    tmp_path: Path,
) -> None:
    """Segment 3 published its checkpoint itself and stopped at its deadline: collect checks
    Kaggle's copy on a sample and keeps a stub naming that version, for the next segment to
    mount; the weights never cross the orchestrator's link, the dataset stays, and a collect
    asked again (its answer lost to a restart) downloads nothing."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2, enable_internet=True)
        expect = _expect(3)
        handle, published = _published_and_ended(emulator, backend, tmp_path)
        slug = checkpoint_slug(JOB, 3)
        store = tmp_path / "store" / "00003"
        before = emulator.link_bytes()
        collected = _collected(backend, handle, store)
        crossed = emulator.link_bytes() - before
        again = backend.collect(handle, store)
        crossed_again = emulator.link_bytes() - before - crossed
        left = _checkpoint_datasets(emulator)
        assert emulator.internal_errors == []
    assert collected.problem is None, collected.problem
    assert collected.result is not None
    assert (collected.result.outcome, collected.result.end_step) == (Outcome.DEADLINE, 40)
    assert collected.result.timings.upload == 2.5  # the session's publishing counts as upload
    remote = read_remote(store)
    assert remote is not None  # a stub, naming the very version the session published
    assert (remote.dataset_ref, remote.version) == (f"alice/{slug}", published.version)
    assert verify_stored(store, expect).step == 40
    assert collected.checkpoint == again.checkpoint == store
    assert collected.transport == again.transport == KERNEL
    assert collected.link_bytes is not None
    assert collected.link_bytes < len(WEIGHTS)
    assert crossed < len(WEIGHTS)
    assert again.manifest == collected.manifest
    assert (again.link_bytes, crossed_again) == (0, 0)
    assert left == [slug]
    # ...and the retried collect still counts the session's publishing as its upload.
    assert again.result == collected.result


WEIGHTS = bytes(range(256)) * 1024  # 256 KiB: past the published check's sample


def _published_and_ended(
    emulator: Emulator,
    backend: KaggleBackend,
    tmp_path: Path,
    segment_index: int = 3,
    outcome: str = "deadline",
) -> tuple[str, PublishedCheckpoint]:
    """A segment's session (3 by default), which published its checkpoint (weights `WEIGHTS`)
    to a dataset of its own, said so in its output and ended (at its deadline): its handle, once
    it ended."""
    expect = _expect(segment_index)
    checkpoint = _final_output(tmp_path / "made", segment_index, outcome, WEIGHTS)
    slug = checkpoint_slug(JOB, segment_index)
    own = CheckpointDataset(backend.account, slug, tmp_path / "session" / "publish")
    result = tmp_path / "made" / RESULT_FILE
    published = publish_until_settled(own, checkpoint, expect=expect, result=result)
    assert isinstance(published, PublishedCheckpoint), published
    size = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    Published(slug, published.file_name, size, 2.5).write(tmp_path / "made" / PUBLISH_FILE)
    kernel = JobKernel(backend.account, kernel_slug(JOB))
    pushed = kernel.push(script_leaving(tmp_path / "made"), CPU_PUSH)
    deadline = time.monotonic() + 120  # a hang guard
    while emulator.sessions(kernel.ref)[-1].status is not WorkerStatus.COMPLETE:
        assert time.monotonic() < deadline, emulator.sessions(kernel.ref)
        time.sleep(0.05)
    start = _expect(segment_index - 1).step
    handle = KaggleHandle(kernel.ref, segment_index, pushed.version, JOB, 60.0, start)
    return handle.encode(), published


def _collected(backend: KaggleBackend, handle: str, store: Path) -> Collected:
    """Collect as the engine does: asked again on every Transient."""
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        try:
            return backend.collect(handle, store)
        except Transient:
            assert time.monotonic() < deadline, "never collected"
            time.sleep(0.1)


def test_a_published_copy_that_fails_its_check_is_never_used_and_the_outputs_is_held(
    tmp_path: Path,
) -> None:
    """The copy segment 3's session published is damaged on Kaggle (its weights cut short):
    collect never keeps a stub of it, and holds the output's own copy instead, whole and
    verified, the next launch uploading it as before."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2, enable_internet=True)
        handle, _ = _published_and_ended(emulator, backend, tmp_path)
        dataset = emulator.dataset(f"alice/{checkpoint_slug(JOB, 3)}")
        assert dataset is not None
        files = dataset.versions[-1].directory.rglob("*")
        [weights] = [p for p in files if p.is_file() and p.stat().st_size == len(WEIGHTS)]
        weights.write_bytes(WEIGHTS[: len(WEIGHTS) // 2])
        store = tmp_path / "store" / "00003"
        collected = _collected(backend, handle, store)
        assert emulator.internal_errors == []
    assert collected.problem is None, collected.problem
    assert collected.transport == ORCHESTRATOR
    assert read_remote(store) is None  # held here, never a stub of the damaged copy
    assert verify_checkpoint(store, _expect(3)).step == 40
    assert (store / "model.bin").read_bytes() == WEIGHTS
    assert collected.link_bytes is not None
    assert collected.link_bytes > 2 * len(WEIGHTS)  # downloaded here, and uploaded again


def test_a_final_copy_that_fails_its_full_verification_is_never_held_the_outputs_is(
    tmp_path: Path,
) -> None:
    """The job's last session published its checkpoint, and Kaggle's copy of its weights is
    damaged past what the check samples (same size, other bytes): fetched whole, it fails
    verification, so collect holds the output's own copy, whole and verified, and still leaves
    no dataset behind."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        backend = _backend(emulator, tmp_path, keep_versions=2, enable_internet=True)
        handle, _ = _published_and_ended(emulator, backend, tmp_path, outcome="completed")
        dataset = emulator.dataset(f"alice/{checkpoint_slug(JOB, 3)}")
        assert dataset is not None
        files = dataset.versions[-1].directory.rglob("*")
        [weights] = [p for p in files if p.is_file() and p.stat().st_size == len(WEIGHTS)]
        weights.write_bytes(WEIGHTS[::-1])
        store = tmp_path / "store" / "00003"
        collected = _collected(backend, handle, store)
        left = _checkpoint_datasets(emulator)
        assert emulator.internal_errors == []
    assert collected.problem is None, collected.problem
    assert collected.result is not None
    assert collected.result.outcome == Outcome.COMPLETED
    assert read_remote(store) is None  # held here, whole
    assert verify_checkpoint(store, _expect(3)).step == 40
    assert (store / "model.bin").read_bytes() == WEIGHTS
    assert left == []
