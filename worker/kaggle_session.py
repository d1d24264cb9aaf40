"""Runs one segment inside a Kaggle kernel: mount the resume checkpoint, train, leave the output.

The pushed kernel script unpacks Baton's code and calls `run_kaggle_segment`. Kaggle mounts the
job's checkpoint dataset version under /kaggle/input (or under `BATON_KAGGLE_ROOT`, which the
emulator sets), and everything the worker writes to /kaggle/working becomes the session's output.
Standard library plus the worker: no orchestrator imports here.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from worker.accelerator import Accelerators, accelerator_problem, visible_accelerators
from worker.boundary.contract import Outcome, SegmentResult, SegmentSpec
from worker.boundary.kernel_options import KernelControl, KernelOptions, WheelSet
from worker.boundary.launch_id import LaunchId
from worker.boundary.paths import RESULT_FILE, RESUME_PATH, SessionPaths
from worker.boundary.version_layout import find_mounted, other_checkpoints, stage_mounted
from worker.control import relay
from worker.proctime import process_start_time
from worker.runtime import EXIT_FAILED
from worker.runtime import main as run_worker
from worker.wheelhouse import Installed
from worker.wheelhouse import install_requirements as install_job_requirements

_SEARCH_DEPTH = 4
# Self-chaining gives up this long before the session's limit, to exit (and keep its output).
EXIT_SECONDS = 2.0
# A container takes seconds to a few minutes to boot; an older session leader is not the boot.
MAX_BOOT_SECONDS = 600.0
KAGGLE_CLIENT_MINIMUM = (2, 2)
KAGGLE_CLIENT_REQUIREMENTS = ("kaggle>=2.2.4,<2.3", "kagglesdk>=0.1.37,<0.2", "six")

log = logging.getLogger("worker.kaggle")


def kaggle_root() -> Path:
    return Path(os.environ.get("BATON_KAGGLE_ROOT", "/kaggle"))


def find_mounted_checkpoint(
    input_dir: Path, dataset_slug: str, archive: str, measured: Path | None = None
) -> Path | None:
    """The mounted checkpoint published as `archive`, in whichever layout the version holds it
    (its flat files, an archive, or the folder Kaggle unpacked that into: version_layout).

    Kaggle mounts a dataset at input/<slug> (newer images nest it deeper). `measured`: where
    `baton kaggle check` saw this account's datasets mounted, looked at first.
    """
    for mount in _mounts(input_dir, dataset_slug, measured):
        found = find_mounted(mount, archive)
        if found is not None:
            return found
    # Not there: Kaggle served another version. Hand the worker whatever checkpoint it holds,
    # so that its manifest check rejects it by name instead of failing on a missing file.
    for mount in _mounts(input_dir, dataset_slug, measured):
        others = other_checkpoints(mount)
        if others:
            log.error("%s is not in the mounted %s: stale version", archive, dataset_slug)
            return others[-1]
    return None


def _mounts(input_dir: Path, dataset_slug: str, measured: Path | None = None) -> list[Path]:
    """Every folder the dataset may be mounted as: input/<slug>, input/datasets/<owner>/<slug>
    (newer images), and their versions/<N>/ subfolders, newest version first."""
    found = []
    searched = itertools.chain.from_iterable(
        input_dir.glob("/".join(["*"] * depth + [dataset_slug])) for depth in range(_SEARCH_DEPTH)
    )
    for mount in [*([measured] if measured is not None else []), *searched]:
        versions = [v for v in mount.glob("versions/*") if v.name.isdigit()]
        found += [mount, *sorted(versions, key=lambda v: int(v.name), reverse=True)]
    return found


def session_origin(measured_boot_seconds: float = 0.0) -> float:
    """When Kaggle's clock for this session started, as near as this process can tell.

    The container boots before Python starts and Kaggle's timer runs meanwhile, so the origin is
    the start of the oldest process of this process's session (the container's first process),
    unless that is implausibly old (then this process's own start). The boot offset `baton
    kaggle check` measured on the account, if any, is a floor: the earlier origin wins.
    """
    own = process_start_time()
    floor = own - min(max(measured_boot_seconds, 0.0), MAX_BOOT_SECONDS)
    try:
        leader = process_start_time(pid=str(os.getsid(0)))
    except OSError:
        return floor
    return min(leader if own - MAX_BOOT_SECONDS <= leader <= own else own, floor)


def stage_checkpoint(mounted: Path, target: Path) -> None:
    """Put the checkpoint at `target`; the worker verifies its manifest before trusting it.

    Flat files and a folder Kaggle unpacked are linked, not copied: the worker only reads them,
    and a copy would be a second checkpoint-sized write to the session's disk. A mounted
    archive (of a checkpoint with too many files, or one published before) is unpacked.
    """
    stage_mounted(mounted, target)


def install_requirements(requirements: list[str]) -> None:
    if requirements:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requirements], check=True)


def install_job(options: KernelOptions, root: Path) -> Installed | None:
    """The job's requirements, from their wheel set where one is mounted (worker/wheelhouse.py);
    a session without one builds it where it could publish it."""
    wheels = options.wheels
    if wheels is None or not options.requirements:
        return install_job_requirements(options.requirements, [], build=False)
    mounted = _mounts(SessionPaths(root).input, wheels.dataset)
    if wheels.attached and not mounted:
        log.warning("the wheel set %s is not mounted", wheels.dataset)
    return install_job_requirements(options.requirements, mounted, build=_can_publish())


def _can_publish() -> bool:
    """Whether a wheel set built here could be published: building one no later session can
    mount would only add its resolving to this session's install."""
    # (No Kaggle client needed: the Secret is read through Kaggle's own kaggle_secrets.)
    from worker.kaggle_access.secrets import SECRET_LABEL, read_secret

    if read_secret(SECRET_LABEL) is None:
        log.warning(
            "no Kaggle Secret %s: a wheel set could not be published, so none is built",
            SECRET_LABEL,
        )
        return False
    return True


def publishing_wheels(
    wheels: WheelSet | None, installed: Installed | None
) -> threading.Thread | None:
    """Publish a wheel set this session built, in its own thread while the worker trains."""
    if wheels is None or installed is None or installed.built is None:
        return None
    built = installed.built
    thread = threading.Thread(
        target=_publish_wheels, args=(wheels, built), name="baton-wheels", daemon=True
    )
    thread.start()
    return thread


def _publish_wheels(wheels: WheelSet, built: Path) -> None:
    ensure_kaggle_client()
    from worker.boundary.errors import Gone, Rejected, Transient
    from worker.kaggle_access.chaining import secret_key
    from worker.kaggle_access.client import KaggleAccount, production_client
    from worker.kaggle_access.wheels import WheelSetDataset

    key = secret_key()
    if key is None:
        log.warning("the wheel set is not published: no key; the next session builds it again")
        return
    dataset = WheelSetDataset(
        KaggleAccount(wheels.username, key, production_client), wheels.dataset
    )
    try:
        dataset.publish(built)
    except (Transient, Rejected, Gone) as exc:  # the backend error contract, whole
        log.warning("the wheel set is not published (%s); the next session builds it again", exc)
        return
    log.info("published the wheel set as %s", dataset.ref)


def record_install(working: Path, installed: Installed | None) -> None:
    """Say in result.json how the requirements were installed, and how long it took."""
    path = working / RESULT_FILE
    if installed is None or not path.is_file():
        return
    result = SegmentResult.read(path)
    result.timings.install = installed.seconds
    result.requirements = installed.how
    result.write(path)


def ensure_kaggle_client() -> None:
    """Self-chaining drives Kaggle with the client Baton is built on; older images lack it."""
    try:
        installed = tuple(int(part) for part in metadata.version("kaggle").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        installed = (0, 0)
    if installed < KAGGLE_CLIENT_MINIMUM:
        install_requirements(list(KAGGLE_CLIENT_REQUIREMENTS))


def prepare_session(segment: dict[str, Any], options: KernelOptions, root: Path) -> Path:
    """Write the session root the worker reads: segment.json plus input/checkpoint."""
    kaggle = SessionPaths(root)
    session = SessionPaths(Path(tempfile.mkdtemp(prefix="baton-session-")))
    spec = dict(segment, output_dir=str(kaggle.working), resume_path=None)
    if segment.get("expect"):
        measured = options.checkpoint_mount
        assert options.checkpoint_file is not None  # a resumed segment's options name it
        mounted = find_mounted_checkpoint(
            kaggle.input,
            options.checkpoint_dataset,
            options.checkpoint_file,
            root / measured if measured else None,
        )
        if mounted is not None:
            stage_checkpoint(mounted, session.resume_checkpoint)
        # A missing mount still points the worker at it, so the segment is rejected, loudly.
        spec["resume_path"] = RESUME_PATH
    session.segment.write_text(SegmentSpec.from_dict(spec).to_json())
    return session.root


def fail_without_accelerator(segment: dict[str, Any], options: KernelOptions, root: Path) -> bool:
    """Whether the promised accelerator is missing; if so, the segment's result says why."""
    promised = Accelerators(gpus=options.promised_gpus, tpu=options.promised_tpu)
    problem = accelerator_problem(promised, visible_accelerators())
    if problem is None:
        return False
    log.error("%s: not training on what is left", problem)
    start = (segment.get("expect") or {}).get("step", 0)
    result = SegmentResult(
        job_id=segment["job_id"],
        segment_index=segment["segment_index"],
        outcome=Outcome.FAILED,
        start_step=start,
        end_step=start,
        limit_seconds=float(segment["limit_seconds"]),
        error=problem,
    )
    SessionPaths(root).working.mkdir(parents=True, exist_ok=True)
    result.write(SessionPaths(root).result)
    return True


@contextmanager
def owner_listening(
    segment: dict[str, Any], options: KernelOptions, session: Path
) -> Iterator[None]:
    """While the worker trains, relay the owner's pause or cancel from the job's control dataset
    on Kaggle into the session's local control file (worker.control). Needs internet and the
    key in the BATON_KAGGLE_KEY Secret; without them the session runs to its limit, as before.
    Everything runs in its own thread, so the worker's start-up never waits for it."""
    control = options.control
    if control is None:
        yield
        return
    done = threading.Event()
    launch_id = str(LaunchId(segment["job_id"], segment["segment_index"]))
    listener = threading.Thread(
        target=_listen,
        args=(control, launch_id, SessionPaths(session).control, done),
        name="baton-control",
        daemon=True,
    )
    listener.start()
    try:
        yield
    finally:
        done.set()


def _listen(control: KernelControl, launch_id: str, target: Path, done: threading.Event) -> None:
    # Imported only here: the Kaggle client code is needed only by a kernel that listens.
    ensure_kaggle_client()
    from worker.kaggle_access.client import KaggleAccount, production_client
    from worker.kaggle_access.control import ControlDataset, KaggleControlSource
    from worker.kaggle_access.secrets import SECRET_LABEL, read_secret

    key = read_secret(SECRET_LABEL)
    if key is None:
        log.warning(
            "no Kaggle Secret %s readable: pause and cancel cannot reach this session, which "
            "runs to its limit",
            SECRET_LABEL,
        )
        return
    account = KaggleAccount(control.username, key, production_client)
    dataset = ControlDataset(account, control.dataset, Path(tempfile.mkdtemp()))
    log.info("listening for the owner's commands on %s", dataset.ref)
    relay(KaggleControlSource(dataset, launch_id), target, control.poll_seconds, done)


def run_kaggle_segment(segment: dict[str, Any], raw_options: dict[str, Any], code: bytes) -> int:
    """Train the segment; with self-chaining, then publish it and push the next one."""
    options = KernelOptions.from_json(raw_options)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    root = kaggle_root()
    if fail_without_accelerator(segment, options, root):
        return EXIT_FAILED
    installed = install_job(options, root)
    wheels = publishing_wheels(options.wheels, installed)
    session = prepare_session(segment, options, root)
    origin = session_origin(options.boot_offset_seconds)
    log.info("session origin %.1f s before this process started", process_start_time() - origin)
    with owner_listening(segment, options, session):
        exit_code = run_worker(["--root", str(session), "--started-at", repr(origin)])
    deadline = origin + float(segment["limit_seconds"]) - EXIT_SECONDS
    record_install(SessionPaths(root).working, installed)
    if options.publish is not None and exit_code == 0:
        # The in-kernel transport (worker/kaggle_access/publish.py); the client as below.
        ensure_kaggle_client()
        from worker.kaggle_access.publish import publish_checkpoint

        publish_checkpoint(options.publish, SessionPaths(root).working, deadline)
    elif options.chain is not None and exit_code == 0:
        # Imported only here: the Kaggle client code travels only with self-chaining kernels.
        ensure_kaggle_client()
        from worker.kaggle_access.chaining import chain

        chain(segment, options, code, SessionPaths(root).working, deadline)
    if wheels is not None:
        # Started before training; the checkpoint's own publishing went first.
        wheels.join(timeout=max(0.0, deadline - time.time()))
    return exit_code
