"""What a real account meets on its first jobs (issue 17), one backend call at a time, against
the emulator with each first-contact switch on. Each test fails on a backend without the
handling it names (checked on the code before it; see docs/kaggle-emulator.md)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from orchestrator.backends.base import AccountRefused, LaunchRequest, Rejected, Transient
from orchestrator.backends.kaggle.backend import KaggleBackend, KaggleHandle, kernel_slug
from orchestrator.spec import KaggleSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import EXPECT, account_on, committed_checkpoint, publish_until_settled
from worker.boundary.contract import SegmentSpec
from worker.kaggle_access.checkpoints import VISIBLE_WITHIN_SECONDS, CheckpointDataset
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.kernels import JobKernel, KernelPush

JOB = "j1"
SLEEP = "import time\ntime.sleep(60)\n"
CPU = KernelPush(None, 60, False, True, [], [], [], None)
T4 = KernelPush("NvidiaTeslaT4", 60, False, True, [], [], [], None)


def _backend(account: KaggleAccount, tmp_path: Path, **kaggle: object) -> KaggleBackend:
    options = KaggleSpec.model_validate(kaggle_spec(dict(kaggle))["kaggle"])
    return KaggleBackend(account, JOB, options, tmp_path / "kaggle" / JOB)


def _wait(emulator: Emulator, ref: str, wanted: set[WorkerStatus]) -> None:
    deadline = time.monotonic() + 60
    while not emulator.sessions(ref) or emulator.sessions(ref)[-1].status not in wanted:
        assert time.monotonic() < deadline, emulator.sessions(ref)
        time.sleep(0.05)


def test_a_refused_first_push_leaves_a_shell_and_the_job_goes_on_under_a_fresh_slug(
    tmp_path: Path,
) -> None:
    with start_emulator(
        tmp_path / "emulator", **FAST_EMULATOR, max_cpu_sessions=1, refused_push_leaves_shell=True
    ) as emulator:
        alice = account_on(emulator)
        own = JobKernel(alice, "own-notebook")
        own.push("import time\ntime.sleep(1)\n", CPU)  # the user's own notebook holds the cap
        backend = _backend(alice, tmp_path, accelerator="none")
        segment = SegmentSpec(JOB, 0, "trainers.tiny_lm:TinyCharLM", {}, 10, 10)
        request = LaunchRequest(f"{JOB}-0000", segment, None)
        with pytest.raises(Transient, match="Maximum batch CPU session count"):
            backend.launch(request)
        assert emulator.shells == {f"alice/{kernel_slug(JOB)}"}
        _wait(emulator, own.ref, {WorkerStatus.COMPLETE})

        # GetKernel answers 500 for the shell: a passing outage once, a shell the next time.
        with pytest.raises(Transient):
            backend.find(request.launch_id)
        assert backend.find(request.launch_id) is None
        handle = KaggleHandle.decode(backend.launch(request))
        fresh = f"alice/{kernel_slug(JOB)}-r2"
        assert handle.kernel == fresh
        assert emulator.push_counts == {own.ref: 1, fresh: 1}

        # Recorded with the job: a later look (another process) finds the segment there.
        again = _backend(alice, tmp_path, accelerator="none")
        found = again.find(request.launch_id)
        assert found is not None
        assert KaggleHandle.decode(found).kernel == fresh
        assert emulator.push_counts[fresh] == 1


def test_a_slug_that_took_a_push_after_a_refused_one_is_never_taken_for_a_shell(
    tmp_path: Path,
) -> None:
    """The job's first push is deferred (the user's own notebooks hold both GPU slots), its next
    one is accepted: GetKernel answering 500 afterwards is a passing outage, never a shell, so the
    segment that runs is found once Kaggle answers and is never pushed again."""
    options = FAST_EMULATOR | {"withheld_accelerators": frozenset({"gpu"})}
    with start_emulator(tmp_path / "emulator", **options) as emulator:
        alice = account_on(emulator)
        own = [JobKernel(alice, f"own-notebook-{n}") for n in (1, 2)]
        for kernel in own:
            kernel.push("import time\ntime.sleep(1)\n", T4)
        backend = _backend(alice, tmp_path)
        segment = SegmentSpec(JOB, 0, "trainers.tiny_lm:TinyCharLM", {}, 10, 10)
        request = LaunchRequest(f"{JOB}-0000", segment, None)
        with pytest.raises(Transient, match="GPU session"):
            backend.launch(request)
        for kernel in own:
            _wait(emulator, kernel.ref, {WorkerStatus.COMPLETE})
        launched = KaggleHandle.decode(backend.launch(request))

        emulator.faults.fail_next("GetKernel", FaultKind.SERVER_ERROR, times=3)
        answers: list[str | None] = []
        for _ in range(4):
            try:
                answers.append(backend.find(request.launch_id))
            except Transient:
                answers.append("outage")
        ref = f"alice/{kernel_slug(JOB)}"
        assert emulator.push_counts[ref] == 1
    assert answers[:3] == ["outage"] * 3
    found = answers[3]
    assert found is not None
    assert KaggleHandle.decode(found).kernel == launched.kernel == ref
    assert KaggleHandle.decode(found).version == launched.version


@pytest.mark.parametrize("keeps_output", [True, False], ids=["kaggle", "old-emulator"])
def test_a_cut_sessions_committed_checkpoint_is_collected(
    tmp_path: Path, keeps_output: bool
) -> None:
    # The session commits a checkpoint, then never reports: Kaggle cuts it at its limit.
    script = (
        "import pathlib, signal, time\n"
        "from worker.boundary.manifest import write_manifest\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "d = pathlib.Path('checkpoint')\n"
        "d.mkdir()\n"
        "(d / 'model.bin').write_bytes(b'weights' * 100)\n"
        f"write_manifest(d, job_id={JOB!r}, segment_index=0, step=7, model_digest='d' * 64)\n"
        "time.sleep(60)\n"
    )
    with start_emulator(
        tmp_path / "emulator", **FAST_EMULATOR, cut_keeps_output=keeps_output
    ) as emulator:
        alice = account_on(emulator)
        backend = _backend(alice, tmp_path)
        kernel = JobKernel(alice, kernel_slug(JOB))
        pushed = kernel.push(script, KernelPush(None, 3, False, True, [], [], [], None))
        ended = {WorkerStatus.CANCEL_ACKNOWLEDGED, WorkerStatus.ERROR}
        _wait(emulator, kernel.ref, ended)
        handle = KaggleHandle(kernel.ref, 0, pushed.version, JOB, 3, start_step=0).encode()
        collected = backend.collect(handle, tmp_path / "store" / "00000")
        if not keeps_output:
            # What the emulator did before: ERROR, output deleted. Nothing to collect.
            assert emulator.sessions(kernel.ref)[-1].status is WorkerStatus.ERROR
            assert collected.checkpoint is None
            return
        assert emulator.sessions(kernel.ref)[-1].status is WorkerStatus.CANCEL_ACKNOWLEDGED
        assert collected.problem is None, collected.problem
        assert collected.result is not None
        assert collected.result.committed
        assert collected.result.end_step == 7
        assert collected.manifest is not None
        assert collected.manifest.step == 7
        assert collected.checkpoint == tmp_path / "store" / "00000"


def test_an_account_without_phone_verification_is_refused_for_good(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, phone_verified=False) as emulator:
        alice = account_on(emulator)
        for push in (T4, KernelPush(None, 60, True, True, [], [], [], None)):
            with pytest.raises(AccountRefused, match="phone"):
                JobKernel(alice, "needs-a-phone").push(SLEEP, push)
        # CPU without internet runs: that is all `baton kaggle check` used to push.
        assert JobKernel(alice, "cpu-only").push(SLEEP, CPU).version == 1


def _wait_visible(emulator: Emulator, ref: str) -> None:
    """Until GetDatasetStatus finds the dataset (a new one 404s for a moment)."""
    api = emulator.kaggle_api()
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        try:
            api.dataset_status(ref)
            return
        except requests.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_create_that_answered_500_is_adopted_never_uploaded_twice(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    emulator.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)
    first = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "staging")
    with pytest.raises(Transient):
        first.ensure_published(EXPECT, checkpoint)
    _wait_visible(emulator, "alice/baton-ckpt-j1")
    # Another publisher without the first one's record (a restored data dir), while Kaggle's
    # GetDataset still lags: the client's own title check says "already in use".
    emulator.faults.fail_next("GetDataset", FaultKind.NOT_FOUND)
    second = CheckpointDataset(alice, "baton-ckpt-j1", tmp_path / "restored")
    published = publish_until_settled(second, checkpoint)
    assert getattr(published, "version", None) == 1, published
    assert getattr(publish_until_settled(first, checkpoint), "version", None) == 1
    # The checkpoint's files, each uploaded once.
    uploaded = emulator.state.blobs.started_names()
    assert len(uploaded) == len(set(uploaded)) == len(list(checkpoint.iterdir()))
    assert len(emulator.calls("CreateDataset")) == 1
    record = emulator.dataset("alice/baton-ckpt-j1")
    assert record is not None
    assert len(record.versions) == 1


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_a_500_on_create_with_the_storage_full_names_the_storage_limit(tmp_path: Path) -> None:
    checkpoint = committed_checkpoint(tmp_path / "ckpt")
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, private_storage_bytes=10) as em:
        em.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)
        clock = _Clock()
        dataset = CheckpointDataset(account_on(em), "baton-ckpt-j1", tmp_path / "s", clock)
        for _ in range(3):
            with pytest.raises(Transient):
                dataset.ensure_published(EXPECT, checkpoint)
            time.sleep(0.3)
        clock.now += VISIBLE_WITHIN_SECONDS + 1
        refusals = []
        for _ in range(5):  # an unanswered create is sent again, at most MAX_UPLOADS times
            try:
                dataset.ensure_published(EXPECT, checkpoint)
            except Rejected as refused:
                refusals.append(str(refused))
                break
            except Transient:
                clock.now += VISIBLE_WITHIN_SECONDS + 1
        assert refusals
        assert "private dataset storage is full" in refusals[0]
        assert len(em.calls("StartBlobUpload")) <= 3


def test_a_five_part_model_source_and_a_competition_are_accepted_and_mounted(
    tmp_path: Path,
) -> None:
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "weights.txt").write_text("w")
    data = tmp_path / "titanic"
    data.mkdir()
    (data / "train.csv").write_text("a,b\n")
    with start_emulator(
        tmp_path / "emulator",
        **FAST_EMULATOR,
        models={"google/gemma/pytorch/2b/1": weights},
        competitions={"titanic": data},
    ) as emulator:
        backend = _backend(
            account_on(emulator),
            tmp_path,
            accelerator="none",
            model_sources=["google/gemma/pytorch/2b/1"],
            competition_sources=["titanic"],
        )
        segment = SegmentSpec(JOB, 0, "trainers.tiny_lm:TinyCharLM", {}, 10, 10)
        backend.launch(LaunchRequest(f"{JOB}-0000", segment, None))
        (session,) = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    names = {mount.name for mount in session.mounts}
    assert names == {"models/google/gemma/pytorch/2b/1", "competitions/titanic"}


def test_a_model_source_kaggle_cannot_mount_is_a_refusal_naming_it(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR) as emulator:
        backend = _backend(
            account_on(emulator),
            tmp_path,
            accelerator="none",
            model_sources=["google/gemma/pytorch/7b"],
        )
        segment = SegmentSpec(JOB, 0, "trainers.tiny_lm:TinyCharLM", {}, 10, 10)
        with pytest.raises(Rejected, match="google/gemma/pytorch/7b"):
            backend.launch(LaunchRequest(f"{JOB}-0000", segment, None))
