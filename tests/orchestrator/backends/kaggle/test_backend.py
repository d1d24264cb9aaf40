"""The Kaggle backend against the emulator: status by version, the stale clock, foreign results,
quota with omitted fields, the CPU cap."""

from __future__ import annotations

import ast
import base64
import io
import json
import re
import tarfile
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.backends.base import LaunchRequest, SessionStatus, Transient
from orchestrator.backends.kaggle.backend import (
    WHEELSET_PREFIX,
    KaggleBackend,
    KaggleHandle,
    _is_wheel_set,
    checkpoint_slug,
    dataset_slug,
    kernel_slug,
    segment_of,
    wheelset_slug,
)
from orchestrator.backends.kaggle.control import control_slug
from orchestrator.backends.kaggle.findings import WheelSetUsers
from orchestrator.spec import MIN_SESSION_SECONDS, KaggleSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, ManualClock, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import account_on, embedded_options
from worker.boundary.contract import SegmentSpec
from worker.boundary.kernel_options import KernelControl, Publish, SelfChain, WheelSet
from worker.kaggle_access.checkpoints import upload_folder
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.kernel_script import LAUNCH_ID_MARK
from worker.kaggle_access.kernels import JobKernel, KernelPush
from worker.kaggle_access.wheels import WheelSetDataset

CPU_PUSH = KernelPush(None, 60, False, True, [], [], [], None)
SLEEP = "import time\ntime.sleep(60)\n"
JOB = "j1"
TRAINER = "trainers.tiny_lm:TinyCharLM"


def _backend(
    account: KaggleAccount, tmp_path: Path, clock: ManualClock | None = None, **kaggle: object
) -> KaggleBackend:
    options = KaggleSpec.model_validate(kaggle_spec(dict(kaggle))["kaggle"])
    workdir = tmp_path / "kaggle" / JOB
    if clock is None:
        return KaggleBackend(account, JOB, options, workdir)
    return KaggleBackend(account, JOB, options, workdir, clock=clock.now)


def _result_script(segment_index: int) -> str:
    result = {
        "job_id": JOB,
        "segment_index": segment_index,
        "outcome": "failed",
        "start_step": 0,
        "end_step": 0,
        "limit_seconds": 60,
        "error": f"segment {segment_index} says hello",
    }
    return f"import json\nopen('result.json', 'w').write({json.dumps(json.dumps(result))})\n"


def _wait_status(emulator: Emulator, ref: str, version: int, wanted: set[WorkerStatus]) -> None:
    import time

    deadline = time.monotonic() + 120  # a hang guard
    while emulator.sessions(ref)[version - 1].status not in wanted:
        assert time.monotonic() < deadline, emulator.sessions(ref)
        time.sleep(0.05)


def test_a_long_gpu_queue_is_neither_collected_nor_pushed_again(tmp_path: Path) -> None:
    clock = ManualClock()
    with start_emulator(
        tmp_path / "emulator", **FAST_EMULATOR | {"queue_seconds": 1200}, clock=clock
    ) as emulator:
        account = account_on(emulator)
        backend = _backend(account, tmp_path, clock)
        kernel = JobKernel(account, kernel_slug(JOB))
        pushed = kernel.push(SLEEP, CPU_PUSH)
        handle = KaggleHandle(kernel.ref, 0, pushed.version, JOB, limit_seconds=60).encode()
        assert backend.status(handle) is SessionStatus.QUEUED
        clock.advance(1190)  # nearly 20 minutes queued: longer than limit + stale margin
        assert backend.status(handle) is SessionStatus.QUEUED
        clock.advance(20)
        _wait_status(emulator, kernel.ref, 1, {WorkerStatus.RUNNING})
        # The stale clock starts at the first RUNNING seen, not at the push.
        assert backend.status(handle) is SessionStatus.RUNNING
        clock.advance(60 + 899)
        assert backend.status(handle) is SessionStatus.RUNNING
        clock.advance(2)
        assert backend.status(handle) is SessionStatus.FINISHED
        assert emulator.push_counts == {kernel.ref: 1}


def test_status_is_read_for_the_handles_own_version(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    backend = _backend(alice, tmp_path)
    kernel = JobKernel(alice, kernel_slug(JOB))
    first = kernel.push("print('done')\n", CPU_PUSH)
    _wait_status(emulator, kernel.ref, 1, {WorkerStatus.COMPLETE})
    kernel.push(SLEEP, CPU_PUSH)
    _wait_status(emulator, kernel.ref, 2, {WorkerStatus.RUNNING})
    old = KaggleHandle(kernel.ref, 0, first.version, JOB, 60).encode()
    new = KaggleHandle(kernel.ref, 1, 2, JOB, 60).encode()
    assert backend.status(old) is SessionStatus.FINISHED
    assert backend.status(new) is SessionStatus.RUNNING
    labels = {c.version_label for c in emulator.calls("GetKernelSessionStatus")}
    assert labels == {"v1", "v2"}


def test_another_versions_result_is_rejected(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    backend = _backend(alice, tmp_path)
    kernel = JobKernel(alice, kernel_slug(JOB))
    kernel.push(_result_script(0), CPU_PUSH)
    _wait_status(emulator, kernel.ref, 1, {WorkerStatus.COMPLETE})
    kernel.push(_result_script(1), CPU_PUSH)
    _wait_status(emulator, kernel.ref, 2, {WorkerStatus.COMPLETE})
    emulator.faults.ignore_output_labels = True  # Kaggle serves version 2's output as "v1"
    handle = KaggleHandle(kernel.ref, 0, 1, JOB, 60).encode()
    collected = backend.collect(handle, tmp_path / "store" / "00000")
    assert collected.result is None
    assert collected.problem is not None
    assert "segment 1" in collected.problem
    emulator.faults.ignore_output_labels = False
    honest = backend.collect(handle, tmp_path / "store" / "00000")
    assert honest.result is not None
    assert honest.result.error == "segment 0 says hello"
    assert honest.problem == "segment 0 says hello"  # the reason the job shows: the session's own


def test_a_session_that_left_no_result_is_collected_as_a_problem_naming_what_kaggle_said(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """A kernel that failed before writing its result (an import error, an exit) leaves nothing
    to resume from: collect says so with Kaggle's status and message, and stores nothing."""
    backend = _backend(alice, tmp_path)
    kernel = JobKernel(alice, kernel_slug(JOB))
    kernel.push("import sys\nsys.exit(3)\n", CPU_PUSH)
    _wait_status(emulator, kernel.ref, 1, {WorkerStatus.ERROR})
    handle = KaggleHandle(kernel.ref, 0, 1, JOB, 60).encode()
    store = tmp_path / "store" / "00000"
    collected = backend.collect(handle, store)
    assert (collected.result, collected.manifest, collected.checkpoint) == (None, None, None)
    assert collected.problem is not None
    assert "left no result.json" in collected.problem
    assert "exited with code 3" in collected.problem  # Kaggle's own message
    assert not store.exists()


# Sessions that committed nothing readable: a result.json that does not parse (a download cut
# short, a kernel killed mid-write) says nothing about what the segment did; a session cut while
# it wrote its first checkpoint leaves files but no manifest and no result.
UNREADABLE_ENDS = {
    "damaged-result": "open('result.json', 'w').write('{\"job_id\": \"j1\", ')\n",
    "half-written-checkpoint": (
        "import os\nos.makedirs('checkpoint')\nopen('checkpoint/model.bin', 'w').write('x')\n"
    ),
}


@pytest.mark.parametrize("script", UNREADABLE_ENDS.values(), ids=UNREADABLE_ENDS.keys())
def test_a_session_that_committed_nothing_readable_is_a_problem_never_taken(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, script: str
) -> None:
    """Collect names the unusable result and stores nothing."""
    backend = _backend(alice, tmp_path)
    kernel = JobKernel(alice, kernel_slug(JOB))
    kernel.push(script, CPU_PUSH)
    _wait_status(emulator, kernel.ref, 1, {WorkerStatus.COMPLETE})
    handle = KaggleHandle(kernel.ref, 0, 1, JOB, 60).encode()
    store = tmp_path / "store" / "00000"
    collected = backend.collect(handle, store)
    assert (collected.result, collected.manifest, collected.checkpoint) == (None, None, None)
    assert (collected.problem or "").startswith("no usable result.json: ")
    assert not store.exists()


def test_quota_works_when_kaggle_omits_zero_durations(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    # A user who never ran a GPU session: no timeUsed, no timeReserved in the response.
    quota = _backend(alice, tmp_path).quota()
    assert quota is not None
    assert quota.seconds_left == 30 * 3600
    assert not any(
        "timeUsed" in json.dumps(call.__dict__)
        for call in emulator.calls("GetAcceleratorQuotaStatistics")
    )


def test_the_cpu_session_cap_is_busy_not_a_failure(
    emulator: Emulator, alice: KaggleAccount
) -> None:
    for n in range(5):
        assert not JobKernel(alice, f"cpu-{n}").push(SLEEP, CPU_PUSH).invalid_sources
    with pytest.raises(Transient, match="Maximum batch CPU session count of 5"):
        JobKernel(alice, "cpu-6").push(SLEEP, CPU_PUSH)


def test_cancel_says_kaggle_cannot_stop_the_session(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    backend = _backend(alice, tmp_path)
    kernel = JobKernel(alice, kernel_slug(JOB))
    pushed = kernel.push(SLEEP, CPU_PUSH)
    handle = KaggleHandle(kernel.ref, 0, pushed.version, JOB, 60).encode()
    assert backend.cancel(handle) is False
    assert emulator.calls("CancelKernelSession") == []
    assert kernel.url == f"https://www.kaggle.com/code/alice/{kernel_slug(JOB)}"


def test_watching_a_self_chained_segment_costs_one_status_call_and_no_source_fetch(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    backend = _backend(alice, tmp_path, self_chain=True, enable_internet=True)
    kernel = JobKernel(alice, kernel_slug(JOB))
    pushed = kernel.push(SLEEP, CPU_PUSH)
    handle = KaggleHandle(kernel.ref, 0, pushed.version, JOB, 60).encode()
    before = len(emulator.calls())
    for _ in range(20):  # 10 minutes of looks at 30 s
        assert backend.status(handle) in (SessionStatus.QUEUED, SessionStatus.RUNNING)
    made = emulator.calls()[before:]
    assert [call.method for call in made] == ["GetKernelSessionStatus"] * 20
    assert backend.poll_seconds == 30.0


def test_what_the_preflight_measured_goes_to_the_kernel(
    alice: KaggleAccount, tmp_path: Path
) -> None:
    backend = _backend(alice, tmp_path)
    unmeasured = backend._kernel_options(CPU_PUSH)
    assert (unmeasured.checkpoint_mount, unmeasured.boot_offset_seconds) == (None, 0.0)
    backend.findings.update(
        mount_layout="input/datasets/<owner>/<slug>/versions/2", boot_offset_seconds=41.5
    )
    measured = backend._kernel_options(CPU_PUSH)
    assert (measured.checkpoint_mount, measured.boot_offset_seconds) == (
        f"input/datasets/alice/baton-ckpt-{JOB}",
        41.5,
    )


def test_a_fractional_limit_is_floored_for_the_kernel_and_its_worker_alike(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    # Kaggle's timeout is whole seconds. A worker that planned to 10.9 s under a 10 s timeout
    # would be cut off before it saved, and its segment lost.
    backend = _backend(alice, tmp_path)
    segment = SegmentSpec(JOB, 0, "trainers.tiny_lm:TinyCharLM", {}, 100, 10.9)
    backend.launch(LaunchRequest(f"{JOB}-00000", segment, None))
    (session,) = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    embedded = re.search(r"^SEGMENT = json\.loads\((.+)\)$", session.script, re.MULTILINE)
    assert embedded is not None
    planned = json.loads(ast.literal_eval(embedded.group(1)))["limit_seconds"]
    assert session.limit_seconds == planned == 10


@pytest.mark.parametrize("reserve_hours", [0.5, 24.0])
def test_the_quota_reserve_is_kept_back_from_what_segments_are_sized_to(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path, reserve_hours: float
) -> None:
    """The quota a segment is sized to is what Kaggle grants less the job's reserve (the last
    session of the week stops that much early)."""
    reserve = reserve_hours * 3600
    quota = _backend(alice, tmp_path, quota_reserve_seconds=reserve).quota()
    assert quota is not None
    assert quota.seconds_left == 30 * 3600 - reserve


def test_the_quota_left_is_the_allowance_less_what_sessions_used_and_still_reserve(
    tmp_path: Path,
) -> None:
    """A T4 session ten minutes into its hour has used 10 minutes and still reserves 50: a GPU job
    is left 30 h less that hour. A TPU job reads the TPU's own 20 h, which no GPU session
    touches. Both wait for the weekly refresh."""
    clock = ManualClock()
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, clock=clock) as emulator:
        account = account_on(emulator)
        notebook = JobKernel(account, "own-gpu-notebook")
        notebook.push(SLEEP, KernelPush("NvidiaTeslaT4", 3600, False, True, [], [], [], None))
        clock.advance(1)  # past the queue time, on the emulator's clock
        _wait_status(emulator, notebook.ref, 1, {WorkerStatus.RUNNING})
        clock.advance(600)
        now = clock.now()
        gpu = _backend(account, tmp_path, clock).quota()
        tpu = _backend(account, tmp_path / "tpu", clock, accelerator="tpu").quota()
    assert gpu is not None
    assert gpu.seconds_left == 30 * 3600 - 3600
    # ...until the weekly refresh, a moment in UTC still ahead, when a waiting job wakes.
    assert gpu.refresh_at is not None
    assert gpu.refresh_at.utcoffset() == timedelta(0)
    assert gpu.refresh_at.timestamp() > now
    assert tpu is not None
    assert tpu.seconds_left == 20 * 3600


def test_an_earlier_segment_is_found_at_its_own_version_while_a_later_one_runs(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    """Self-chaining: segments 0 and 1 pushed their successors themselves, so the kernel runs
    segment 2 as version 3 when the orchestrator, restarted, asks for segment 0's session. It is
    found, at version 1, so it is collected and never pushed again; a segment not pushed yet is
    not found."""
    backend = _backend(alice, tmp_path, self_chain=True, enable_internet=True)
    kernel = JobKernel(alice, kernel_slug(JOB))
    for index in (0, 1):
        kernel.push(f"{LAUNCH_ID_MARK}{JOB}-{index:04d}\nprint('done')\n", CPU_PUSH)
        _wait_status(emulator, kernel.ref, index + 1, {WorkerStatus.COMPLETE})
    kernel.push(f"{LAUNCH_ID_MARK}{JOB}-0002\n{SLEEP}", CPU_PUSH)
    _wait_status(emulator, kernel.ref, 3, {WorkerStatus.RUNNING})
    for index, state in enumerate([SessionStatus.FINISHED] * 2 + [SessionStatus.RUNNING]):
        found = backend.find(f"{JOB}-{index:04d}")
        assert found is not None, index
        handle = KaggleHandle.decode(found)
        assert (handle.segment_index, handle.version, handle.job_id) == (index, index + 1, JOB)
        assert backend.status(found) is state
    assert backend.find(f"{JOB}-0003") is None
    assert emulator.push_counts == {kernel.ref: 3}


def test_a_segment_is_pushed_as_its_job_asks_and_its_kernel_told_what_it_was_promised(
    tmp_path: Path,
) -> None:
    """A TPU job with internet, its own image, data and requirements: the push asks for the
    TPU, the whole-second limit, internet and a private kernel on that image, and mounts the
    data and the READY wheel set; the kernel is told the TPU it must find, where to publish its
    checkpoint, where to hear pause and cancel, and what to install from where. The handle
    names that very version."""
    clock = ManualClock()  # the emulator's time stands still: the pushed session stays queued
    image = "gcr.io/kaggle-images/python:v150"
    requirements = ["tqdm==4.66.1"]
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, clock=clock) as emulator:
        account = account_on(emulator)
        wheels = wheelset_slug(requirements, image)
        built = tmp_path / "wheelhouse"
        built.mkdir()
        (built / "tqdm-4.66.1-py3-none-any.whl").write_bytes(b"a wheel")
        WheelSetDataset(account, wheels).publish(built)
        data = tmp_path / "data"
        data.mkdir()
        (data / "train.csv").write_text("a,b\n")
        upload_folder(
            account, "alice/extra-data", data, "the user's data", exists=False, busy=False
        )
        clock.advance(60)  # both datasets' versions are READY
        backend = _backend(
            account,
            tmp_path,
            clock,
            accelerator="tpu",
            enable_internet=True,
            docker_image=image,
            requirements=requirements,
            control_poll_seconds=45.0,
            dataset_sources=["alice/extra-data"],
        )
        segment = SegmentSpec(JOB, 0, TRAINER, {}, 100, 3600.7)
        launched = backend.launch(LaunchRequest(f"{JOB}-00000", segment, None))
        ref = f"alice/{kernel_slug(JOB)}"
        with emulator.state.lock:
            kernel = emulator.state.kernels.kernels[ref]
            request, [session] = kernel.request, list(kernel.sessions)
        assert emulator.push_counts == {ref: 1}
    assert (request.machine_shape, session.accelerator) == ("TpuV5E8", "tpu")
    assert (request.session_timeout_seconds, session.limit_seconds) == (3600, 3600)
    assert (request.enable_internet, request.is_private, request.docker_image) == (
        True,
        True,
        image,
    )
    # The user's data, and the wheel set unpinned: its newest version is built for this image.
    assert request.dataset_sources == ["alice/extra-data", f"alice/{wheels}"]
    options = embedded_options(session.script)
    assert (options.promised_tpu, options.promised_gpus) == (True, 0)
    assert options.requirements == requirements
    assert options.wheels == WheelSet("alice", wheels, attached=True)
    # Claimed for the account, whose other jobs may use the same set.
    assert WheelSetUsers(tmp_path / "kaggle", "alice").claimed_by(JOB) == [wheels]
    assert options.checkpoint_dataset == dataset_slug(JOB)
    assert (options.checkpoint_file, options.chain) == (None, None)
    assert options.publish == Publish("alice", checkpoint_slug(JOB, 0))
    # The job's own channel: a pause or cancel of another job never reaches this kernel.
    assert options.control == KernelControl("alice", control_slug(JOB), 45.0)
    assert KaggleHandle.decode(launched) == KaggleHandle(ref, 0, 1, JOB, 3600.0, 0)


@pytest.mark.parametrize(
    ("accelerator", "shape", "gpus", "tpu"),
    [("t4x2", "NvidiaTeslaT4", 2, False), ("tpu", "TpuV5E8", 0, True)],
)
def test_a_self_chaining_kernel_is_told_to_push_its_successor_as_it_was_pushed(
    tmp_path: Path, accelerator: str, shape: str, gpus: int, tpu: bool
) -> None:
    """A self-chaining job: the kernel pushes its successor to its own slug, the same way,
    naming its checkpoint as the account accepts (unpinned where Kaggle refused a pin), sized to
    its accelerator's quota (a TPU's is its own) less the job's reserve. Its requirements, with
    wheel sets turned off, are installed from the index."""
    clock = ManualClock()
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, clock=clock) as emulator:
        backend = _backend(
            account_on(emulator),
            tmp_path,
            clock,
            accelerator=accelerator,
            self_chain=True,
            enable_internet=True,
            quota_reserve_seconds=600.0,
            control_poll_seconds=0.0,
            requirements=["tqdm==4.66.1"],
            wheel_set=False,
        )
        backend.findings.update(pinned_sources=False)
        segment = SegmentSpec(JOB, 0, TRAINER, {}, 100, 1200.0)
        backend.launch(LaunchRequest(f"{JOB}-00000", segment, None))
        [session] = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    options = embedded_options(session.script)
    assert (options.promised_gpus, options.promised_tpu) == (gpus, tpu)
    # One dataset for the whole chain, which every kernel of the job publishes to itself.
    assert (options.checkpoint_dataset, options.publish) == (dataset_slug(JOB), None)
    assert options.control is None  # it does not listen: control_poll_seconds is 0
    # Wheel sets turned off: each session pip-installs the requirements from the index.
    assert (options.requirements, options.wheels) == (["tqdm==4.66.1"], None)
    assert backend.wheel_users.claimed_by(JOB) == []
    push = KernelPush(shape, 1200, True, True, [], [], [], None)
    assert options.chain == SelfChain(
        username="alice",
        kernel_slug=kernel_slug(JOB),
        push=asdict(push),
        pinned_sources=False,
        uses_quota=True,
        tpu=tpu,
        quota_reserve_seconds=600.0,
        min_session_seconds=MIN_SESSION_SECONDS,
    )


def test_a_handle_reads_back_as_written_and_an_older_or_newer_baton_s_handle_reads_too() -> None:
    """The engine stores the handle a launch answered and hands it back on every call: it reads
    back whole; one stored by an older Baton (no job, limit or start step: an adopted push
    records none either) reads with those unknown; one with a field this Baton does not know is
    read for the fields it does."""
    handle = KaggleHandle("alice/baton-j1", 3, 4, JOB, 3600.0, 120)
    assert KaggleHandle.decode(handle.encode()) == handle
    older = json.dumps({"kernel": "alice/baton-j1", "segment_index": 3, "version": None})
    assert KaggleHandle.decode(older) == KaggleHandle("alice/baton-j1", 3, None, "", 0.0, 0)
    newer = json.dumps({**json.loads(handle.encode()), "queued_on": "a GPU"})
    assert KaggleHandle.decode(newer) == handle
    # A launch id names its segment (a kernel's first lines carry it): padded to 4 or 5 digits.
    assert [segment_of(f"{JOB}-0012"), segment_of(f"{JOB}-00012")] == [12, 12]
    # Each version of a segment is its own session to the stale clock.
    assert (
        len({handle.key, replace(handle, version=5).key, replace(handle, segment_index=4).key}) == 3
    )


def test_each_job_s_kernel_and_datasets_are_its_own_and_a_wheel_set_is_shared_by_requirements() -> (
    None
):
    """Retention deletes a job's checkpoint datasets by name: no name of one job is a name of
    another's, nor of its other segments'. A wheel set is named by the requirements (in any
    order or spacing) and the image, so jobs that install the same on the same image share it,
    and never take a checkpoint dataset for one."""
    jobs = ["j0123456789ab", "j0123456789ac"]
    names = [
        [kernel_slug(job), dataset_slug(job), *(checkpoint_slug(job, i) for i in (0, 1, 10))]
        for job in jobs
    ]
    assert len({name for job_names in names for name in job_names}) == 10
    assert all(jobs[0] in name for name in names[0])
    image = "gcr.io/kaggle-images/python:v150"
    shared = wheelset_slug(["tqdm==4.66.1", "rich"], image)
    assert wheelset_slug(["rich", " tqdm==4.66.1"], image) == shared
    others = {
        wheelset_slug(["tqdm==4.66.1"], image),
        wheelset_slug(["tqdm==4.66.1", "rich"], None),
        wheelset_slug(["tqdm==4.66.1", "rich"], "gcr.io/kaggle-images/python:v151"),
    }
    assert shared not in others
    assert len(others) == 3
    # A source Kaggle cannot mount fails the launch, unless it is the wheel set (the session
    # then pip-installs from the index): a checkpoint is never taken for one.
    assert _is_wheel_set(f"alice/{shared}")
    sources = [f"alice/{name}" for job_names in names for name in job_names]
    assert not any(_is_wheel_set(source) for source in [*sources, f"{WHEELSET_PREFIX}x/data"])


def test_a_trainer_found_only_on_the_trainer_paths_travels_in_the_kernel_s_code(
    tmp_path: Path,
) -> None:
    """BATON_TRAINER_PATHS: a kernel reaches nothing of the orchestrator's disk, so the
    operator's trainer package, on no import path, is embedded in the code it is pushed with."""
    package = tmp_path / "operator-code" / "site_trainers_k"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("class SiteTrainer:\n    pass\n")
    clock = ManualClock()
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR, clock=clock) as emulator:
        options = KaggleSpec.model_validate(kaggle_spec({"accelerator": "none"})["kaggle"])
        backend = KaggleBackend(
            account_on(emulator),
            JOB,
            options,
            tmp_path / "kaggle" / JOB,
            trainer_paths=[package.parent],
        )
        segment = SegmentSpec(JOB, 0, "site_trainers_k.model:SiteTrainer", {}, 100, 60.0)
        backend.launch(LaunchRequest(f"{JOB}-00000", segment, None))
        [session] = emulator.sessions(f"alice/{kernel_slug(JOB)}")
    code = re.search(r'^CODE = "(.*)"$', session.script, re.MULTILINE)
    assert code is not None
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(code.group(1))), mode="r:gz") as tar:
        names = tar.getnames()
    assert "site_trainers_k/model.py" in names
