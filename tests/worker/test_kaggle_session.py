"""A Kaggle segment inside its kernel: what `baton kaggle check` measured reaches it (the mount
looked at first, the boot offset as a floor under the session's origin), the mounted checkpoint
is found and staged, and the kernel's own steps (the accelerator check, the requirements, the
segment itself) run here in this process, in a folder laid out like /kaggle."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kagglesdk import kaggle_env

import worker.proctime
from tests.factories import fast_emulator, wheel_file
from tests.kaggle_emulator import Emulator, FaultKind
from tests.kaggle_emulator.user_secrets import IMAGE_DIR, VALUES_FILE_ENV, write_values
from tests.support.kaggle import account_on
from tests.support.marks import starts_processes
from tests.support.segments import make_spec, next_spec
from worker.accelerator import EMULATED_ENV
from worker.boundary.contract import CheckpointRef, Outcome, SegmentResult, SegmentSpec
from worker.boundary.errors import Transient
from worker.boundary.kernel_options import (
    KernelControl,
    KernelOptions,
    Publish,
    SelfChain,
    WheelSet,
)
from worker.boundary.launch_id import LaunchId
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import MANIFEST_FILE, RESUME_PATH, SessionPaths
from worker.boundary.transport import PUBLISH_FILE, Published
from worker.boundary.version_layout import flat_name, published_name, stage_upload
from worker.control import Command
from worker.kaggle_access.chaining import SECRET_LABEL
from worker.kaggle_access.checkpoints import CheckpointDataset
from worker.kaggle_access.control import ControlDataset
from worker.kaggle_access.publish import publish_checkpoint
from worker.kaggle_session import (
    ensure_kaggle_client,
    find_mounted_checkpoint,
    install_job,
    install_requirements,
    kaggle_root,
    prepare_session,
    run_kaggle_segment,
    session_origin,
    stage_checkpoint,
)
from worker.proctime import process_start_time
from worker.runtime import EXIT_COMMITTED, EXIT_FAILED, EXIT_REJECTED
from worker.wheelhouse import INDEX

ARCHIVE = "checkpoint-s00000-step10-abc.tar"


def _segment_0_once_ready(dataset: CheckpointDataset) -> int:
    """The version holding segment 0's published checkpoint, once Kaggle has processed it."""
    deadline = time.monotonic() + 60
    version = None
    while version is None and time.monotonic() < deadline:
        with contextlib.suppress(Transient):  # still processing
            version = dataset.find_segment(0)
        time.sleep(0.2)
    assert version is not None
    return version


def test_a_measured_mount_deeper_than_the_search_is_found(tmp_path: Path) -> None:
    measured = tmp_path / "input" / "a" / "b" / "c" / "d" / "baton-ckpt-j1"
    (measured / "versions" / "3").mkdir(parents=True)
    (measured / "versions" / "3" / ARCHIVE).write_bytes(b"tar")
    assert find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE) is None
    found = find_mounted_checkpoint(tmp_path / "input", "baton-ckpt-j1", ARCHIVE, measured)
    assert found == measured / "versions" / "3" / ARCHIVE


def test_the_measured_boot_offset_is_a_floor_under_the_origin() -> None:
    own = process_start_time()
    slack = 0.1  # each reading of /proc converts jiffies to epoch seconds afresh
    assert session_origin() <= own + slack
    assert session_origin(measured_boot_seconds=45.0) <= own - 45.0 + slack
    # An implausible measurement is capped like the live reading.
    assert session_origin(measured_boot_seconds=1e9) >= own - 600.0 - slack


def _origin_in_a_session_of_its_own(leader_age: float, measured: float) -> list[float]:
    """[session_origin(measured), its own start, its session leader's start] in a process
    whose session's first process started `leader_age` seconds before it (0: it leads its own
    session). Forked, not spawned, so it runs this very code (a mutant under test included)
    and the result never depends on how old the test run's own session leader is."""
    read, write = os.pipe()
    leader = os.fork()
    if leader == 0:  # the new session's leader; the process measured reports through the pipe
        try:
            os.setsid()
            time.sleep(leader_age)
            if leader_age == 0 or os.fork() == 0:
                # As a freshly started interpreter would: proctime takes a start after its own
                # import (in the test run, before the fork) for implausible.
                importlib.reload(worker.proctime)
                pid = str(os.getsid(0))
                values = [
                    session_origin(measured),
                    process_start_time(),
                    process_start_time(pid=pid),
                ]
                os.write(write, json.dumps(values).encode())
            else:
                os.wait()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    os.waitpid(leader, 0)
    seen: list[float] = json.loads(reported)
    return seen


@pytest.mark.parametrize(
    ("leader_age", "measured", "origin_is"),
    [
        (0.0, 0.0, "own"),
        (0.0, -5.0, "own"),
        (0.0, 45.0, "own - 45"),
        (0.0, 1e9, "own - 600"),
        (0.5, 0.0, "leader"),
        (0.5, 0.2, "leader"),
        (0.5, 45.0, "own - 45"),
    ],
)
def test_the_origin_is_the_session_leaders_start_or_the_measured_boot_whichever_is_earlier(
    leader_age: float, measured: float, origin_is: str
) -> None:
    """The container's first process started when Kaggle's clock did; the boot offset
    `baton kaggle check` measured (never negative, at most 600 s) is a floor under it."""
    origin, own, leader = _origin_in_a_session_of_its_own(leader_age, measured)
    expected = {
        "own": own,
        "leader": leader,
        "own - 45": own - 45.0,
        "own - 600": own - 600.0,
    }[origin_is]
    slack = 0.05  # each reading of /proc converts jiffies to epoch seconds afresh
    assert abs(origin - expected) < slack
    assert (own - leader > 0.3) == (leader_age > 0)


SLUG = "baton-ckpt-j1"
PUBLISH_LOG = "worker.kaggle.publish"


def _put(path: Path, *, unpacked: bool = False) -> Path:
    if unpacked:
        path.mkdir(parents=True)
        (path / MANIFEST_FILE).write_text("{}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"tar")
    return path


def test_the_checkpoint_is_found_in_every_layout_kaggle_mounts_it_in(tmp_path: Path) -> None:
    """input/<slug>/<archive>, the folder Kaggle unpacked it into, input/datasets/<owner>/<slug>
    (newer images), and versions/<N>/ under any of them."""
    layouts = {
        "flat": tmp_path / "1" / SLUG / ARCHIVE,
        "nested": tmp_path / "2" / "datasets" / "alice" / SLUG / ARCHIVE,
        "versioned": tmp_path / "3" / SLUG / "versions" / "2" / ARCHIVE,
    }
    for name, path in layouts.items():
        root = path.parents[len(path.relative_to(tmp_path).parts) - 2]
        assert find_mounted_checkpoint(root, SLUG, ARCHIVE) is None, name
        _put(path)
        assert find_mounted_checkpoint(root, SLUG, ARCHIVE) == path, name
    unpacked = _put(tmp_path / "4" / SLUG / ARCHIVE.removesuffix(".tar"), unpacked=True)
    assert find_mounted_checkpoint(tmp_path / "4", SLUG, ARCHIVE) == unpacked
    # Deeper than input/*/*/*/<slug> is not searched (a measured mount is looked at first).
    _put(tmp_path / "5" / "a" / "b" / "c" / "d" / SLUG / ARCHIVE)
    assert find_mounted_checkpoint(tmp_path / "5", SLUG, ARCHIVE) is None


def test_the_newest_mounted_version_is_looked_at_first(tmp_path: Path) -> None:
    mount = tmp_path / SLUG
    for version in ("2", "10", "9"):
        _put(mount / "versions" / version / ARCHIVE)
    (mount / "versions" / "latest").mkdir()
    assert find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == mount / "versions/10" / ARCHIVE


def test_another_mounted_version_is_handed_over_for_its_manifest_check_to_reject(
    tmp_path: Path,
) -> None:
    """Kaggle served a version without the expected checkpoint: the worker gets the newest one it
    holds, so that its manifest check names the stale checkpoint instead of a missing file."""
    mount = tmp_path / SLUG
    _put(mount / "checkpoint-s00000-step5-aaa.tar")
    newest = _put(mount / "checkpoint-s00001-step8-bbb.tar")
    (mount / "notes.txt").write_text("not a checkpoint")
    assert find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == newest
    assert find_mounted_checkpoint(tmp_path, "another-slug", ARCHIVE) is None


def test_a_mounted_archive_or_folder_is_staged_whole(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / MANIFEST_FILE).write_text('{"step": 3}')
    (source / "sub" / "weights.pt").write_bytes(b"\x00\x01")
    archive = tmp_path / ARCHIVE
    with tarfile.open(archive, "w") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False)
    for mounted, target in ((archive, tmp_path / "from-tar"), (source, tmp_path / "from-dir")):
        stage_checkpoint(mounted, target)
        assert (target / MANIFEST_FILE).read_text() == '{"step": 3}'
        assert (target / "sub" / "weights.pt").read_bytes() == b"\x00\x01"


def test_the_expected_checkpoint_wins_over_another_version_in_the_same_mount(
    tmp_path: Path,
) -> None:
    """Kaggle may mount several checkpoints side by side (or unpack them): the one the segment
    expects is taken, never the newest other one, in the measured mount too."""
    for name, measured in (
        ("searched", None),
        ("measured", tmp_path / "m" / "x" / "y" / "z" / "w"),
    ):
        root = tmp_path / name
        mount = measured / SLUG if measured is not None else root / SLUG
        expected = _put(mount / ARCHIVE.removesuffix(".tar"), unpacked=True)
        _put(mount / "checkpoint-s00001-step20-zzz", unpacked=True)
        found = find_mounted_checkpoint(
            root, SLUG, ARCHIVE, mount if measured is not None else None
        )
        assert found == expected, name


def test_the_measured_mount_wins_over_another_folder_of_the_slug_the_search_finds(
    tmp_path: Path,
) -> None:
    measured = tmp_path / "input" / "a" / "b" / "c" / "d" / SLUG
    expected = _put(measured / ARCHIVE)
    _put(tmp_path / "input" / SLUG / "checkpoint-s00000-step5-aaa.tar")  # an older layout's
    assert find_mounted_checkpoint(tmp_path / "input", SLUG, ARCHIVE, measured) == expected


def test_a_stale_version_in_the_measured_mount_is_handed_over_for_its_manifest_check(
    tmp_path: Path,
) -> None:
    measured = tmp_path / "input" / "a" / "b" / "c" / "d" / SLUG
    stale = _put(measured / "checkpoint-s00000-step5-aaa.tar")
    assert find_mounted_checkpoint(tmp_path / "input", SLUG, ARCHIVE, measured) == stale


def test_of_several_other_versions_the_newest_is_handed_over(tmp_path: Path) -> None:
    mount = tmp_path / SLUG
    for name in (
        "checkpoint-s00000-step5-a",
        "checkpoint-s00001-step8-b",
        "checkpoint-s00002-step9-c",
    ):
        _put(mount / f"{name}.tar")
    assert (
        find_mounted_checkpoint(tmp_path, SLUG, ARCHIVE) == mount / "checkpoint-s00002-step9-c.tar"
    )


def test_an_archive_member_that_escapes_the_target_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "payload"
    evil.write_text("outside")
    archive = tmp_path / ARCHIVE
    with tarfile.open(archive, "w") as tar:
        tar.add(evil, arcname="../escaped.txt")
    with pytest.raises(tarfile.FilterError):
        stage_checkpoint(archive, tmp_path / "stage" / "target")
    assert not (tmp_path / "stage" / "escaped.txt").exists()


def test_a_mounted_folder_is_staged_without_a_copy_and_reads_as_its_bytes(tmp_path: Path) -> None:
    # Kaggle's input is read-only and a copy would be a second checkpoint-sized write to the
    # session's disk (issue 18): the stage is a link to the mount, files behind links included.
    source = tmp_path / "source"
    source.mkdir()
    real = tmp_path / "real.pt"
    real.write_bytes(b"weights")
    (source / "weights.pt").symlink_to(real)
    stage_checkpoint(source, tmp_path / "target")
    staged = tmp_path / "target" / "weights.pt"
    assert staged.read_bytes() == b"weights"
    assert (tmp_path / "target").resolve() == source.resolve()


# The kernel's own steps, in this process. A session's /kaggle is a folder here
# (`BATON_KAGGLE_ROOT`, as the emulator sets it), the accelerator the one the emulator names, and
# pip runs for real, offline, installing into a folder of its own from wheels made here.


@pytest.fixture
@starts_processes  # pip
def pip_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where pip installs: offline, from `wheels/` only, never into the test environment."""
    (tmp_path / "wheels").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return tmp_path / "site"


KaggleSession = Callable[..., Path]


@pytest.fixture
def kaggle_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KaggleSession:
    """Makes a fresh session's /kaggle (input/, working/ as the script's cwd) with `machine` as
    what the session can see, and points the kernel at it, as the emulator's runner does."""
    (tmp_path / "tmp").mkdir()
    # The session's scratch (mkdtemp) stays inside the test's folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def new(name: str, machine: str = "none", *, laid_out: bool = True) -> Path:
        root = tmp_path / name
        if laid_out:
            (root / "input").mkdir(parents=True)
            (root / "working").mkdir()
            monkeypatch.chdir(root / "working")
        monkeypatch.setenv("BATON_KAGGLE_ROOT", str(root))
        monkeypatch.setenv(EMULATED_ENV, machine)
        return root

    return new


# The kernel's clock starts at this process's start (or its session leader's), however long the
# test run has been going by then: a session as long as Kaggle's longest keeps every deadline
# of these tests ahead of them.
LONG = 12 * 3600.0
SLOW_UPLOAD = 20_000.0  # bytes a second: the test checkpoint (about 80 kB) takes seconds


def _segment(spec: SegmentSpec) -> dict[str, Any]:
    """The segment as the kernel script hands it over: the spec's JSON, parsed."""
    loaded: dict[str, Any] = json.loads(spec.to_json())
    return loaded


def _options(**fields: Any) -> dict[str, Any]:
    return KernelOptions(checkpoint_dataset=SLUG, **fields).to_json()


def _installed(site: Path) -> set[str]:
    """The distributions pip installed into `site`, as name-version."""
    return {path.name.removesuffix(".dist-info") for path in site.glob("*.dist-info")}


def test_the_session_root_is_kaggles_unless_the_emulator_names_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATON_KAGGLE_ROOT", raising=False)
    assert kaggle_root() == Path("/kaggle")
    monkeypatch.setenv("BATON_KAGGLE_ROOT", str(tmp_path))
    assert kaggle_root() == tmp_path


@pytest.mark.parametrize(
    ("promised", "machine", "expect", "laid_out", "reason"),
    [
        (
            {"promised_tpu": True},
            "none",
            None,
            False,
            "the session was promised a TPU but has no accelerator (kaggle-api #1197)",
        ),
        (
            {"promised_gpus": 2},
            "gpu:1",
            CheckpointRef("job-1", 2, 40),
            True,
            "the session was promised 2 GPUs but CUDA sees 1",
        ),
    ],
    ids=["tpu-first-segment", "two-gpus-resumed"],
)
def test_a_session_without_the_promised_accelerator_fails_with_the_reason_and_trains_nothing(
    kaggle_session: KaggleSession,
    promised: dict[str, Any],
    machine: str,
    expect: CheckpointRef | None,
    laid_out: bool,
    reason: str,
) -> None:
    """Kaggle may run a push without the accelerator it asked for (kaggle-api #1197): the
    segment fails at once, its result naming the reason and the step it would have resumed,
    whether or not Kaggle had made working/ yet, and nothing is trained."""
    root = kaggle_session("kaggle", machine, laid_out=laid_out)
    spec = make_spec(segment_index=2 if expect else 0, expect=expect, limit_seconds=900.0)
    code = run_kaggle_segment(_segment(spec), _options(**promised), b"")
    assert code == EXIT_FAILED
    step = expect.step if expect else 0
    assert SegmentResult.read(SessionPaths(root).result) == SegmentResult(
        job_id="job-1",
        segment_index=spec.segment_index,
        outcome=Outcome.FAILED,
        start_step=step,
        end_step=step,
        limit_seconds=900.0,
        error=reason,
    )
    assert not SessionPaths(root).checkpoint.exists()


def test_two_sessions_end_on_the_uninterrupted_digest_the_second_resuming_from_the_mounted_archive(
    kaggle_session: KaggleSession, pip_target: Path
) -> None:
    """Two sessions of a job, the second resuming from the first's checkpoint mounted as the
    version Kaggle serves (its files at the top level, under their flat names), end with the
    digest of one uninterrupted session; the first installs its requirements before training,
    and its clock starts the boot offset `baton kaggle check` measured before this process
    did."""
    wheel = wheel_file(pip_target.parent / "wheels", "baton-demo-requirement", "1.0")
    first = make_spec(total_steps=8, config={"stop_every_steps": 4}, limit_seconds=LONG)
    root = kaggle_session("first", "gpu:1")
    called_at = time.time()
    options = _options(requirements=[str(wheel)], promised_gpus=1, boot_offset_seconds=600.0)
    assert run_kaggle_segment(_segment(first), options, b"") == EXIT_COMMITTED
    stopped = SegmentResult.read(SessionPaths(root).result)
    assert (stopped.outcome, stopped.start_step, stopped.end_step) == (Outcome.STOPPED, 0, 4)
    assert _installed(pip_target) == {"baton_demo_requirement-1.0"}
    # The worker's clock began at the session's origin: 600 s before this process started.
    assert stopped.timings.startup >= called_at - process_start_time() + 600.0 - 0.1

    expect = CheckpointRef("job-1", 0, 4)
    archive = published_name(expect, SessionPaths(root).checkpoint)
    second = next_spec(first, stopped)
    resumed_root = kaggle_session("second")
    stage_upload(SessionPaths(root).checkpoint, archive, resumed_root / "input" / SLUG)
    code = run_kaggle_segment(_segment(second), _options(checkpoint_file=archive), b"")
    assert code == EXIT_COMMITTED
    finished = SegmentResult.read(SessionPaths(resumed_root).result)
    assert (finished.start_step, finished.end_step) == (4, 8)
    verify_checkpoint(SessionPaths(resumed_root).checkpoint, CheckpointRef("job-1", 1, 8))

    kaggle_session("uninterrupted")
    code = run_kaggle_segment(_segment(replace(first, config={})), _options(), b"")
    assert code == EXIT_COMMITTED
    uninterrupted = SegmentResult.read(SessionPaths(kaggle_root()).result)
    assert uninterrupted.end_step == 8
    assert finished.model_digest == uninterrupted.model_digest


def test_a_resumed_segment_whose_checkpoint_is_not_mounted_is_rejected_never_trained_from_scratch(
    kaggle_session: KaggleSession,
) -> None:
    root = kaggle_session("kaggle")
    spec = make_spec(
        segment_index=1, expect=CheckpointRef("job-1", 0, 4), total_steps=8, limit_seconds=LONG
    )
    code = run_kaggle_segment(_segment(spec), _options(checkpoint_file=ARCHIVE), b"")
    assert code == EXIT_REJECTED
    result = SegmentResult.read(SessionPaths(root).result)
    assert (result.outcome, result.start_step, result.end_step) == (Outcome.REJECTED, 4, 4)
    assert not SessionPaths(root).checkpoint.exists()


def test_the_worker_reads_the_segment_with_kaggles_working_folder_as_its_output(
    kaggle_session: KaggleSession,
) -> None:
    """A first segment: the spec whole, its output /kaggle/working, nothing to resume."""
    root = kaggle_session("kaggle")
    spec = make_spec(config={"lr": 0.1}, limit_seconds=700.0)
    session = prepare_session(_segment(spec), KernelOptions(checkpoint_dataset=SLUG), root)
    # The session's own folder is scratch, never part of the output Kaggle keeps.
    assert not session.is_relative_to(root)
    staged = SegmentSpec.read(SessionPaths(session).segment)
    assert staged == replace(spec, output_dir=str(root / "working"), resume_path=None)
    assert not SessionPaths(session).resume_checkpoint.exists()


def test_the_checkpoint_in_the_measured_mount_is_staged_where_the_worker_resumes_from(
    kaggle_session: KaggleSession,
) -> None:
    """`baton kaggle check` measured this account's mount deeper than the search goes: the
    checkpoint Kaggle unpacked there is what the worker finds at its resume path."""
    root = kaggle_session("kaggle")
    mount = Path("input") / "a" / "b" / "c" / "d" / SLUG
    _put(root / mount / ARCHIVE.removesuffix(".tar"), unpacked=True)
    expect = CheckpointRef("job-1", 0, 10)
    spec = make_spec(segment_index=1, expect=expect)
    options = KernelOptions(SLUG, checkpoint_file=ARCHIVE, checkpoint_mount=str(mount))
    session = prepare_session(_segment(spec), options, root)
    staged = SegmentSpec.read(SessionPaths(session).segment)
    assert staged == replace(spec, output_dir=str(root / "working"), resume_path=RESUME_PATH)
    assert (SessionPaths(session).resume_checkpoint / MANIFEST_FILE).read_text() == "{}"


def test_requirements_that_cannot_be_installed_fail_the_session_before_it_trains(
    kaggle_session: KaggleSession, pip_target: Path
) -> None:
    root = kaggle_session("kaggle")
    options = _options(requirements=["baton-no-such-requirement"])
    with pytest.raises(subprocess.CalledProcessError):
        run_kaggle_segment(_segment(make_spec()), options, b"")
    assert not SessionPaths(root).result.exists()


def test_without_the_secret_no_wheel_set_is_built_and_the_index_installs_as_before(
    kaggle_session: KaggleSession, pip_target: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A set this session could not publish would serve no later session: building it would
    only add its resolving to the install."""
    wheel_file(pip_target.parent / "wheels", "baton-demo-requirement", "1.0")
    options = KernelOptions(
        checkpoint_dataset=SLUG,
        requirements=["baton-demo-requirement"],
        wheels=WheelSet("alice", "baton-wheels-0123456789abcdef"),
    )
    with caplog.at_level(logging.WARNING):
        installed = install_job(options, kaggle_session("kaggle"))
    assert installed is not None
    assert installed.how == INDEX
    assert installed.built is None
    assert "so none is built" in caplog.text
    assert _installed(pip_target) == {"baton_demo_requirement-1.0"}


def test_no_requirements_install_nothing(pip_target: Path) -> None:
    install_requirements([])
    assert not pip_target.exists()


def test_an_image_with_batons_kaggle_client_installs_nothing(pip_target: Path) -> None:
    """This environment has the client Baton pins (the wheels folder is empty: any install
    would fail)."""
    ensure_kaggle_client()
    assert not pip_target.exists()


@pytest.mark.parametrize("version", ["1.6.17", "unknown"])
def test_an_image_with_an_older_or_unreadable_kaggle_client_gets_the_pinned_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_target: Path, version: str
) -> None:
    """Self-chaining drives Kaggle with the client Baton is built on: an older image (or one
    whose client's version cannot be read) gets that client, within its pins."""
    image = tmp_path / "image"
    (image / f"kaggle-{version}.dist-info").mkdir(parents=True)
    (image / f"kaggle-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: kaggle\nVersion: {version}\n"
    )
    monkeypatch.syspath_prepend(str(image))
    for name, versions in (("kaggle", ("2.2.9", "2.3.0")), ("kagglesdk", ("0.1.40", "0.2.0"))):
        for available in versions:
            wheel_file(pip_target.parent / "wheels", name, available)
    wheel_file(pip_target.parent / "wheels", "six", "1.17.0")
    ensure_kaggle_client()
    assert _installed(pip_target) == {"kaggle-2.2.9", "kagglesdk-0.1.40", "six-1.17.0"}


@pytest.fixture
@starts_processes  # the Kaggle API emulator
def kaggle_api(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pip_target: Path,
) -> Iterator[Emulator]:
    """The emulator as the kernel's Kaggle, reached by the unmodified production client the way
    the emulator's image points it there (tests/kaggle_emulator/kaggle_image/sitecustomize.py),
    with alice's key attached to the kernel as the BATON_KAGGLE_KEY Secret. (pip is sandboxed:
    the kernel makes sure of its Kaggle client before it publishes.) A test may parametrize it
    indirectly with more emulator options."""
    with fast_emulator(tmp_path / "emulator", **getattr(request, "param", {})) as running:
        monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "TEST")
        monkeypatch.setitem(kaggle_env._env_to_endpoint, kaggle_env.KaggleEnv.TEST, running.url)
        monkeypatch.syspath_prepend(str(IMAGE_DIR))  # kaggle_secrets, as Kaggle's image has it
        values = write_values(tmp_path, 1, {SECRET_LABEL: "alice-key"})
        monkeypatch.setenv(VALUES_FILE_ENV, str(values))
        yield running


def _publish_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines publishing wrote to the session's log (what `baton logs` shows the user)."""
    return [record.getMessage() for record in caplog.records if record.name == PUBLISH_LOG]


def _published_line(line: str, name: str, size: int) -> float:
    """The seconds the session's "published" line gives, once it names the checkpoint and
    its bytes."""
    said = re.fullmatch(rf"published {re.escape(name)} \({size} bytes\) in (\d+\.\d) s", line)
    assert said is not None, line
    return float(said.group(1))


@pytest.mark.parametrize(
    "kaggle_api", [{"orchestrator_upload_bytes_per_second": SLOW_UPLOAD}], indirect=True
)
def test_an_upload_abandoned_at_the_deadline_ends_quietly_with_the_checkpoint_left_in_place(
    kaggle_session: KaggleSession,
    kaggle_api: Emulator,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the deadline the session stops waiting for an upload still running (here Kaggle takes
    the checkpoint at 20 kB/s) and leaves its committed checkpoint to the orchestrator. The call
    it abandoned goes on reading its staged files until the session ends, and never fails on a
    folder removed under it: the session's log says why it stopped, with no traceback."""
    failures: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    root = kaggle_session("kaggle")
    code = run_kaggle_segment(
        _segment(make_spec(total_steps=3, limit_seconds=LONG)), _options(), b""
    )
    assert code == EXIT_COMMITTED
    paths = SessionPaths(root)
    with caplog.at_level(logging.INFO, PUBLISH_LOG):
        published = publish_checkpoint(
            Publish("alice", "baton-ckpt-job-1-s0"), paths.working, time.time() + 1.0
        )
    assert not published
    assert _publish_log(caplog) == ["the upload outlasted the session; the orchestrator fetches it"]
    assert not (paths.working / PUBLISH_FILE).exists()
    assert verify_checkpoint(paths.checkpoint, CheckpointRef("job-1", 0, 3)).step == 3
    [call] = [thread for thread in threading.enumerate() if thread.name == "baton-kaggle-call"]
    call.join(timeout=120)
    assert not call.is_alive()
    assert failures == []


def test_the_session_publishes_its_own_committed_checkpoint_before_it_ends(
    kaggle_session: KaggleSession,
    kaggle_api: Emulator,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The in-kernel transport: the session uploads its checkpoint as the dataset the
    orchestrator named, and says so in publish.json, within its limit, and in its log: what it
    published, how many bytes, and how long that took."""
    root = kaggle_session("kaggle")
    publish = Publish("alice", "baton-ckpt-job-1-s0")
    options = _options(publish=publish)
    started = time.time()
    with caplog.at_level(logging.INFO, PUBLISH_LOG):
        code = run_kaggle_segment(
            _segment(make_spec(total_steps=3, limit_seconds=LONG)), options, b""
        )
    assert code == EXIT_COMMITTED
    paths = SessionPaths(root)
    name = published_name(CheckpointRef("job-1", 0, 3), paths.checkpoint)
    published = Published.read(paths.working / PUBLISH_FILE)
    assert (published.dataset_slug, published.archive) == (publish.dataset, name)
    [line] = _publish_log(caplog)
    # The log rounds to a tenth of a second what publish.json records; the upload took part of
    # the call's time.
    assert _published_line(line, name, published.archive_bytes) == float(f"{published.seconds:.1f}")
    assert 0 <= published.seconds < time.time() - started
    # Kaggle processes the upload after the session: the ready version holds the checkpoint's
    # files at its top level, each at its committed size.
    dataset = CheckpointDataset(account_on(kaggle_api), publish.dataset, tmp_path / "staging")
    version = _segment_0_once_ready(dataset)
    files = dataset.files(version)
    committed = {
        flat_name(name, path.relative_to(paths.checkpoint).as_posix()): path.stat().st_size
        for path in paths.checkpoint.rglob("*")
        if path.is_file()
    }
    assert committed.items() <= files.items()
    assert published.archive_bytes == sum(committed.values())


@pytest.mark.parametrize("kaggle_answers", ["500-after-taking-it", "accepted-never-ready"])
def test_the_session_asks_again_after_a_passing_error_and_never_waits_for_processing(
    kaggle_session: KaggleSession,
    kaggle_api: Emulator,
    kaggle_answers: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An upload Kaggle answers with a 500 (having taken it, kaggle-api #424) is asked about
    again until Kaggle has it; an upload Kaggle accepted is handed over at once, even where
    processing never ends, so no session time goes to waiting for it. Either way publish.json
    names the checkpoint, and the time publishing took, which the orchestrator learns as the
    session's upload time (the session's limit is 12 h: a session that waited would not end)."""
    root = kaggle_session("kaggle")
    if kaggle_answers == "500-after-taking-it":
        kaggle_api.faults.fail_next("CreateDataset", FaultKind.SERVER_ERROR_AFTER_EFFECT)
    else:
        kaggle_api.faults.dataset_outcomes = ["BLOBS_RECEIVED"]
    options = _options(publish=Publish("alice", "baton-ckpt-job-1-s0"))
    started = time.time()
    with caplog.at_level(logging.INFO, PUBLISH_LOG):
        code = run_kaggle_segment(
            _segment(make_spec(total_steps=3, limit_seconds=LONG)), options, b""
        )
    assert code == EXIT_COMMITTED
    paths = SessionPaths(root)
    published = Published.read(paths.working / PUBLISH_FILE)
    assert published.archive == published_name(CheckpointRef("job-1", 0, 3), paths.checkpoint)
    assert 0 < published.seconds < time.time() - started
    record = kaggle_api.dataset("alice/baton-ckpt-job-1-s0")
    assert record is not None
    assert len(record.versions) == 1  # asked again, never sent twice
    # The log says why the session asked again, then what it published.
    *waits, last = _publish_log(caplog)
    if kaggle_answers == "500-after-taking-it":
        assert waits[0] == "publishing: CreateDataset: HTTPError 500", waits
    else:
        assert waits == []
    _published_line(last, published.archive, published.archive_bytes)


@pytest.mark.parametrize("trouble", ["refused", "no-time-left"])
def test_a_checkpoint_the_session_cannot_publish_is_left_for_the_orchestrator_and_its_log_says_why(
    kaggle_session: KaggleSession,
    kaggle_api: Emulator,
    caplog: pytest.LogCaptureFixture,
    trouble: str,
) -> None:
    """Whatever stops publishing (Kaggle refusing the account, no time left before the
    session's deadline), the session ends with its committed checkpoint in its output and no
    publish.json, so the orchestrator fetches the output (today's path), and its log says why.
    Nothing is sent once the deadline has passed."""
    root = kaggle_session("kaggle")
    code = run_kaggle_segment(
        _segment(make_spec(total_steps=3, limit_seconds=LONG)), _options(), b""
    )
    assert code == EXIT_COMMITTED
    paths = SessionPaths(root)
    owner = "mallory" if trouble == "refused" else "alice"  # alice's key, as the Secret
    deadline = time.time() + LONG
    if trouble == "no-time-left":
        deadline = time.time() - 1
    with caplog.at_level(logging.INFO, PUBLISH_LOG):
        publish_checkpoint(Publish(owner, "baton-ckpt-job-1-s0"), paths.working, deadline)
    assert not (paths.working / PUBLISH_FILE).exists()
    assert verify_checkpoint(paths.checkpoint, CheckpointRef("job-1", 0, 3)).step == 3
    fetches = "the orchestrator fetches"
    says = {
        "refused": [
            f"publishing stopped: GetDataset: Kaggle refused access (401); {fetches} the checkpoint"
        ],
        "no-time-left": [f"the checkpoint was not published in time; {fetches} it"],
    }
    assert _publish_log(caplog) == says[trouble]
    if trouble == "no-time-left":
        assert kaggle_api.dataset("alice/baton-ckpt-job-1-s0") is None


def test_a_self_chained_session_publishes_its_final_checkpoint_for_the_orchestrator(
    kaggle_session: KaggleSession, kaggle_api: Emulator, tmp_path: Path
) -> None:
    """Self-chaining: a kernel that ends its job publishes the final checkpoint into the job's
    checkpoint dataset itself, so the orchestrator, offline meanwhile, finds the job finished
    there (the guarantee's product test runs this in an emulated kernel process)."""
    kaggle_session("kaggle")
    link = SelfChain("alice", "baton-j1", {"timeout_seconds": 600, "dataset_sources": []})
    options = _options(chain=link)
    code = run_kaggle_segment(_segment(make_spec(total_steps=3, limit_seconds=LONG)), options, b"")
    assert code == EXIT_COMMITTED
    _segment_0_once_ready(CheckpointDataset(account_on(kaggle_api), SLUG, tmp_path / "staging"))


def test_the_owners_cancel_reaches_the_running_kernel_through_the_control_dataset(
    kaggle_session: KaggleSession, kaggle_api: Emulator, tmp_path: Path
) -> None:
    """A kernel that can hear its owner (internet, the key as a Secret) relays a cancel written
    to the job's control dataset into its worker, which ends the segment, committing nothing.
    Without the relay the segment would train on to its deadline."""
    owner = ControlDataset(account_on(kaggle_api), "baton-ctl-job-1", tmp_path / "owner")
    owner.ensure()
    launch_id = str(LaunchId("job-1", 0))
    deadline = time.monotonic() + 60
    while owner.read(launch_id) is not Command.CANCEL:  # written once the first version is ready
        assert time.monotonic() < deadline
        with contextlib.suppress(Transient):
            owner.send(Command.CANCEL, launch_id)
        time.sleep(0.2)
    root = kaggle_session("kaggle")
    spec = make_spec(total_steps=100_000, config={"step_sleep": 0.01}, limit_seconds=LONG)
    options = _options(control=KernelControl("alice", owner.slug, poll_seconds=0.1))
    assert run_kaggle_segment(_segment(spec), options, b"") == EXIT_FAILED
    cancelled = SegmentResult.read(SessionPaths(root).result)
    assert cancelled.outcome == Outcome.CANCELLED
    assert not SessionPaths(root).checkpoint.exists()
