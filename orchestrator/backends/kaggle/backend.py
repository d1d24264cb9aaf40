"""The Kaggle backend: a job's segments run as versions of its kernel, on one user's account."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, timedelta
from pathlib import Path

from kagglesdk.datasets.types.dataset_api_service import ApiDeleteDatasetRequest
from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest

from orchestrator.backends.base import (
    Collected,
    Gone,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Slot,
    Transient,
)
from orchestrator.backends.kaggle.control import ControlChannel
from orchestrator.backends.kaggle.findings import (
    AccountFindings,
    JobKernelRecord,
    KeptCheckpoints,
    RunningSince,
    WheelSetUsers,
)
from orchestrator.backends.kaggle.handoff import check_published
from orchestrator.backends.kaggle.packaging import code_archive
from orchestrator.spec import MIN_SESSION_SECONDS, Accelerator, KaggleSpec
from worker.accelerator import Accelerators
from worker.boundary.contract import CheckpointRef, Outcome, SegmentResult
from worker.boundary.errors import AccountRefused
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.kernel_options import (
    KernelControl,
    KernelOptions,
    Publish,
    SelfChain,
    WheelSet,
)
from worker.boundary.launch_id import LaunchId
from worker.boundary.manifest import (
    CorruptCheckpoint,
    read_manifest,
    sha256_file,
    verify_checkpoint,
)
from worker.boundary.paths import CHECKPOINT_DIR, MANIFEST_FILE, RESULT_FILE
from worker.boundary.transport import (
    KERNEL,
    ORCHESTRATOR,
    PUBLISH_FILE,
    Published,
    read_remote,
    verify_stored,
    write_stub,
)
from worker.control import Command
from worker.kaggle_access.checkpoints import CheckpointDataset, PublishedCheckpoint
from worker.kaggle_access.client import KaggleAccount, KaggleServerError
from worker.kaggle_access.kernel_script import kernel_source
from worker.kaggle_access.kernels import (
    JobKernel,
    KernelPush,
    KernelShell,
    KernelStatus,
    PushDeferred,
    PushedVersion,
    PushRefused,
)
from worker.kaggle_access.sources import check_dataset_sources
from worker.kaggle_access.wheels import WheelSetDataset
from worker.wheelhouse import requirements_key

log = logging.getLogger(__name__)

# A status still RUNNING this long after the session's own limit (counted from the first RUNNING
# Baton saw, never from the push: a GPU queue can hold a session for long) is stale (the API and
# UI have shown finished sessions as running, kaggle-cli #473): collect what is there.
STALE_AFTER_SECONDS = 900.0
# A measured mount layout ends in the probe's own version folder; the kernel lists versions itself.
VERSION_FOLDER = re.compile(r"/versions/\d+/?$")
# A downloaded checkpoint that fails verification is fetched again this many times.
DOWNLOAD_ATTEMPTS = 3
WHEELSET_PREFIX = "baton-wheels-"
# Fresh slugs one launch may move to when Kaggle answers "Notebook not found" (a shell).
MAX_FRESH_SLUGS = 3


def kernel_slug(job_id: str) -> str:
    return f"baton-{job_id}"


def dataset_slug(job_id: str) -> str:
    return f"baton-ckpt-{job_id}"


def checkpoint_slug(job_id: str, segment_index: int) -> str:
    """The dataset holding one checkpoint, the one segment `segment_index` committed."""
    return f"{dataset_slug(job_id)}-s{segment_index}"


def wheelset_slug(requirements: Sequence[str], docker_image: str | None) -> str:
    """The dataset a job's requirements are kept built in, shared by every job of the account
    with the same ones on the same image. The image stands for the Python version and platform,
    which only a session can read: the set itself records them, and a session on another
    interpreter builds it again (worker/wheelhouse.py)."""
    key = "\n".join([docker_image or "kaggle-default", *requirements_key(requirements)])
    return f"{WHEELSET_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _is_wheel_set(source: str) -> bool:
    return source.partition("/")[2].startswith(WHEELSET_PREFIX)


def segment_of(launch_id: str) -> int:
    return LaunchId.parse(launch_id).segment_index


@dataclass(frozen=True)
class KaggleHandle:
    """What Baton keeps of a launched segment: its kernel version, never a session id (Kaggle
    exposes none)."""

    kernel: str
    segment_index: int
    version: int | None
    job_id: str = ""
    limit_seconds: float = 0.0  # the session's own limit; 0 when unknown (adopted pushes)
    start_step: int = 0  # where the segment started; 0 when unknown (adopted pushes)

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, handle: str) -> KaggleHandle:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(handle).items() if k in known})

    @property
    def key(self) -> str:
        return f"{self.segment_index:05d}-v{self.version}"


# What each accelerator puts in a session: "NvidiaTeslaT4" is 2 x T4, and P100 requests run there.
PROMISED = {
    Accelerator.NONE: Accelerators(),
    Accelerator.T4X2: Accelerators(gpus=2),
    Accelerator.P100: Accelerators(gpus=2),
    Accelerator.TPU: Accelerators(tpu=True),
}
# Kaggle runs at most this many batch sessions at once per account.
GPU_SESSIONS_PER_ACCOUNT = 2
CPU_SESSIONS_PER_ACCOUNT = 5
POLL_SECONDS = 30.0


class KaggleBackend:
    name = "kaggle"
    # Queue time counts from the push, so the engine has no backstop of its own: the backend's
    # stale rule decides when RUNNING is no longer believed.
    overrun_slack_seconds: float | None = None

    def __init__(
        self,
        account: KaggleAccount,
        job_id: str,
        options: KaggleSpec,
        workdir: Path,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = POLL_SECONDS,
        trainer_paths: Sequence[Path] = (),
    ) -> None:
        self.poll_seconds = poll_seconds
        # BATON_TRAINER_PATHS: where the trainer's package is found to embed it in the kernel.
        self.trainer_paths = list(trainer_paths)
        self.options = options
        self.workdir = workdir
        self.clock = clock
        # The slug the job pushes to: `baton-<job>`, or a fresh one after Kaggle left a shell.
        self.kernel_record = JobKernelRecord(workdir / "kernel.json", kernel_slug(job_id))
        self.kernel = JobKernel(account, self.kernel_record.load().slug)
        self.dataset = CheckpointDataset(account, dataset_slug(job_id), workdir / "publish")
        self.account = account
        self.running_since = RunningSince(workdir / "running-since.json")
        # The checkpoint datasets still on Kaggle, oldest first (retention deletes the rest).
        self.kept_checkpoints = KeptCheckpoints(workdir / "kept-checkpoints.json")
        self.dataset_deleter: Callable[[str], None] = self._delete_dataset
        self.job_id = job_id
        # Which jobs of the account use each wheel set: the last to finish deletes it.
        self.wheel_users = WheelSetUsers(workdir.parent, account.username)
        # What `baton kaggle check` (or a refused push) learned about this account.
        self.findings = AccountFindings.for_account(workdir.parent, account.username)
        # How pause and cancel reach a running kernel: only one with internet can hear them.
        self.control = ControlChannel(account, job_id, workdir)

    # --- launching ----------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> str:
        # Kaggle's timeout is whole seconds: the session must plan to the limit Kaggle enforces,
        # not to a quota-sized 10.9 s that Kaggle cuts at 10 s, before the worker has saved.
        spec = replace(request.spec, limit_seconds=float(math.floor(request.spec.limit_seconds)))
        # Before anything is published or pushed: a session cannot be stopped once started.
        check_dataset_sources(self.account, list(self.options.dataset_sources))
        push = KernelPush(
            machine_shape=self.options.machine_shape,
            timeout_seconds=int(spec.limit_seconds),
            enable_internet=self.options.enable_internet,
            is_private=self.options.is_private,
            dataset_sources=list(self.options.dataset_sources),
            kernel_sources=self.options.kernel_sources,
            model_sources=self.options.model_sources,
            docker_image=self.options.docker_image,
            competition_sources=self.options.competition_sources,
        )
        checkpoint_file = None
        dataset = self.dataset
        if spec.expect is not None:
            if request.resume_from is None:
                raise Transient("the checkpoint to resume from is not collected yet")
            dataset, published = self._resume_source(spec.expect, request.resume_from)
            self._retain(dataset)
            push = replace(
                push,
                dataset_sources=[
                    self._checkpoint_source(dataset, published),
                    *push.dataset_sources,
                ],
            )
            checkpoint_file = published.file_name
        wheels = self._wheel_set()
        if wheels is not None:
            self.wheel_users.claim(wheels.dataset, self.job_id)
        if wheels is not None and wheels.attached:
            # Unpinned: the newest version is the set built for Kaggle's current image.
            wheel_source = f"{wheels.username}/{wheels.dataset}"
            push = replace(push, dataset_sources=[*push.dataset_sources, wheel_source])
        code = code_archive(spec.trainer, self.trainer_paths)
        if self._listens:
            self.control.prepare()

        def source() -> str:
            # Built per slug: a self-chaining kernel pushes its successor to its own slug.
            publish = None
            if self.options.kernel_transport:
                # The session publishes its checkpoint itself (worker/kaggle_access/publish.py).
                slug = checkpoint_slug(spec.job_id, spec.segment_index)
                publish = Publish(self.account.username, slug)
            kernel_options = self._kernel_options(
                push, dataset.slug, checkpoint_file, publish, wheels
            )
            return kernel_source(request.launch_id, spec, kernel_options, code)

        pushed = self._push(source, push)
        handle = KaggleHandle(
            self.kernel.ref,
            spec.segment_index,
            pushed.version,
            spec.job_id,
            spec.limit_seconds,
            spec.expect.step if spec.expect is not None else 0,
        )
        refused = [s for s in pushed.invalid_sources if s.startswith(f"{dataset.ref}/")]
        if refused:
            # The session runs without its checkpoint, and its worker rejects it at once. Later
            # pushes name the dataset unpinned; the manifest check guards against staleness.
            self.findings.update(pinned_sources=False)
        elif invalid := [s for s in pushed.invalid_sources if not _is_wheel_set(s)]:
            # (An unmountable wheel set only costs the session a pip install from the index.)
            raise Rejected(
                f"Kaggle could not mount {', '.join(invalid)}; the session "
                f"started without them and may run on: stop it at {self.kernel.url}"
            )
        return handle.encode()

    def _wheel_set(self) -> WheelSet | None:
        """The job's wheel set, attached where a READY version exists (one GetDataset call); a
        session given one unattached builds and publishes it. None: no requirements, or the
        spec turned wheel sets off."""
        if not self.options.requirements or not self.options.wheel_set:
            return None
        slug = wheelset_slug(self.options.requirements, self.options.docker_image)
        ready = WheelSetDataset(self.account, slug).ready()
        return WheelSet(self.account.username, slug, attached=ready)

    def _push(self, source: Callable[[], str], push: KernelPush) -> PushedVersion:
        """Push under the job's slug; where Kaggle left that slug an empty shell (a refused first
        push), go on under a fresh slug, recorded in the job's folder. Nothing ran under the
        shell, so the segment still gets one session."""
        for _ in range(MAX_FRESH_SLUGS):
            try:
                pushed = self.kernel.push(source(), push)
            except KernelShell:
                self.kernel = JobKernel(self.account, self.kernel_record.abandon_shell())
                continue
            except (PushDeferred, PushRefused, AccountRefused):
                self.kernel_record.pushed(accepted=False)
                raise
            self.kernel_record.pushed(accepted=True)
            return pushed
        raise Rejected(
            f"Kaggle answered 'Notebook not found' for {MAX_FRESH_SLUGS} fresh kernel slugs in a "
            f"row (the last {self.kernel.ref}); check the account on kaggle.com"
        )

    def _resume_source(
        self, expect: CheckpointRef, stored: Path
    ) -> tuple[CheckpointDataset, PublishedCheckpoint]:
        """The dataset version the segment mounts: the one its predecessor published itself
        (the store holds a stub naming it), or the stored checkpoint, published now."""
        try:
            remote = read_remote(stored)
        except CorruptCheckpoint as exc:
            raise Rejected(f"the stored checkpoint's record is unusable: {exc}") from exc
        if remote is not None:
            slug = remote.dataset_ref.partition("/")[2]
            dataset = CheckpointDataset(self.account, slug, self.workdir / "publish")
            return dataset, PublishedCheckpoint(remote.version, remote.archive)
        dataset = self._dataset_for(expect.job_id, expect.segment_index)
        return dataset, dataset.ensure_published(expect, stored)

    def _dataset_for(self, job_id: str, segment_index: int) -> CheckpointDataset:
        """Where the checkpoint of `segment_index` is published: a dataset of its own, so that
        older checkpoints can be deleted (the client deletes datasets, never versions); the one
        dataset of a self-chaining job, whose kernels publish there themselves."""
        if self.options.self_chain or self.options.keep_versions == 0:
            return self.dataset
        slug = checkpoint_slug(job_id, segment_index)
        return CheckpointDataset(self.account, slug, self.workdir / "publish")

    def _retain(self, published: CheckpointDataset) -> None:
        """Keep the newest `keep_versions` checkpoint datasets, `published` (which the segment
        being launched mounts) among them; delete the older ones through the official client.
        The job's earlier segments have all been collected, so no running session mounts them."""
        if published is self.dataset:
            return
        kept = self.kept_checkpoints.load()
        if published.slug not in kept:
            kept = self.kept_checkpoints.save([*kept, published.slug])
        while len(kept) > self.options.keep_versions:
            try:
                self.dataset_deleter(kept[0])
            except (Transient, Rejected) as exc:
                # Deleted on a later launch; never a reason to hold this one back.
                log.warning("could not delete %s yet: %s", kept[0], exc)
                return
            kept = self.kept_checkpoints.save(kept[1:])

    def _release_finished_job(self, final_dataset: str | None) -> None:
        """The job is done and its final checkpoint is in Baton's store: delete every dataset it
        holds on Kaggle (its checkpoints, the final one's among them, a self-chaining job's one
        dataset, the control channel, its wheel set where no other job of the account launched
        with it in the last WHEEL_SET_CLAIM_SECONDS), so a finished job takes no private
        storage. Best effort: what cannot be deleted now is named in the log, and stays until
        its owner deletes it on kaggle.com."""
        slugs = [*self.kept_checkpoints.load(), self.dataset.slug, self.control.slug]
        if final_dataset is not None and final_dataset not in slugs:
            slugs.append(final_dataset)
        for slug in self.wheel_users.claimed_by(self.job_id):
            # The job's wheel set too, unless another job of the account still uses it.
            if self.wheel_users.release(slug, self.job_id, self.clock()):
                slugs.append(slug)
        for slug in slugs:
            try:
                self.dataset_deleter(slug)
            except (Transient, Rejected) as exc:
                log.warning("could not delete %s/%s: %s", self.account.username, slug, exc)
        self.kept_checkpoints.save([])

    def _delete_dataset(self, slug: str) -> None:
        request = ApiDeleteDatasetRequest()
        request.owner_slug, request.dataset_slug = self.account.username, slug
        with contextlib.suppress(Gone):  # deleted already
            self.account.call(
                "DeleteDataset", lambda c: c.datasets.dataset_api_client.delete_dataset(request)
            )

    def _kernel_options(
        self,
        push: KernelPush,
        dataset_slug: str | None = None,
        checkpoint_file: str | None = None,
        publish: Publish | None = None,
        wheels: WheelSet | None = None,
    ) -> KernelOptions:
        """What the kernel script needs besides its segment; no secrets, ever."""
        slug = dataset_slug or self.dataset.slug
        found = self.findings.load()
        promised = PROMISED[self.options.accelerator]
        chain = control = None
        if self._listens:
            control = KernelControl(
                self.account.username, self.control.slug, self.options.control_poll_seconds
            )
        if self.options.self_chain:
            chain = SelfChain(
                username=self.account.username,
                kernel_slug=self.kernel.slug,
                push=asdict(push),  # the successor pushes itself the same way
                # ...named as the account accepts, and sized to the quota it reads then.
                pinned_sources=found.pinned_sources,
                uses_quota=self.options.accelerator is not Accelerator.NONE,
                tpu=self.options.accelerator is Accelerator.TPU,
                quota_reserve_seconds=self.options.quota_reserve_seconds,
                min_session_seconds=MIN_SESSION_SECONDS,
            )
        return KernelOptions(
            checkpoint_dataset=slug,
            requirements=list(self.options.requirements),
            # The worker checks the session has it before training (kaggle-api #1197).
            promised_gpus=promised.gpus,
            promised_tpu=promised.tpu,
            checkpoint_file=checkpoint_file,
            checkpoint_mount=self._checkpoint_mount(found.mount_layout, slug),
            boot_offset_seconds=found.boot_offset_seconds or 0.0,
            chain=chain,
            control=control,
            publish=publish,
            wheels=wheels,
        )

    def _checkpoint_mount(self, mount_layout: str | None, dataset_slug: str) -> str | None:
        """Where `baton kaggle check` saw this account's kernels mount a dataset, for the kernel
        to look at first."""
        if not mount_layout:
            return None
        layout = VERSION_FOLDER.sub("", mount_layout)
        return layout.replace("<owner>", self.account.username).replace("<slug>", dataset_slug)

    def _checkpoint_source(self, dataset: CheckpointDataset, published: PublishedCheckpoint) -> str:
        """The checkpoint version pinned (`owner/slug/N`), or unpinned where Kaggle refused pins
        (a dataset of one checkpoint has no other version to mount instead)."""
        if self.findings.load().pinned_sources is False:
            return dataset.ref
        return f"{dataset.ref}/{published.version}"

    def find(self, launch_id: str) -> str | None:
        try:
            current = self.kernel.current_launch()
        except KaggleServerError:
            # A slug whose only pushes were refused and whose GetKernel keeps answering 500 is
            # a shell (issue 17): nothing runs under it. Anything else is a passing outage.
            if self.kernel_record.get_failed():
                return None
            raise
        self.kernel_record.get_answered()
        if current is None:
            return None
        current_id, current_version = current
        wanted, pushed = LaunchId.parse(launch_id), LaunchId.parse(current_id)
        if pushed.job_id != wanted.job_id or pushed.segment_index < wanted.segment_index:
            return None
        # Pushed: by a lost-response push, or by a self-chaining predecessor, in which case the
        # chain may have moved on already (one version per segment).
        ahead = pushed.segment_index - wanted.segment_index
        version = current_version - ahead if current_version else None
        return KaggleHandle(self.kernel.ref, wanted.segment_index, version, wanted.job_id).encode()

    # --- watching -------------------------------------------------------------------------

    def status(self, handle: str) -> SessionStatus:
        """One GetKernelSessionStatus call, for the handle's own version (after writing a pause
        or cancel the control channel could not take yet)."""
        decoded = KaggleHandle.decode(handle)
        if self._listens:
            self.control.deliver()
        status, _ = self._kernel_of(decoded).status(decoded.version)
        if status is KernelStatus.QUEUED:
            return SessionStatus.QUEUED
        if status is KernelStatus.RUNNING:
            since = self.running_since.first_seen(decoded.key, self.clock())
            limit = decoded.limit_seconds or self.options.max_session_seconds
            stale = self.clock() > since + limit + STALE_AFTER_SECONDS
            return SessionStatus.FINISHED if stale else SessionStatus.RUNNING
        return SessionStatus.FINISHED

    def _kernel_of(self, handle: KaggleHandle) -> JobKernel:
        """The kernel a segment was pushed to (an earlier slug's, before a shell moved the job)."""
        owner, _, slug = handle.kernel.partition("/")
        if not slug or handle.kernel == self.kernel.ref or owner != self.account.username:
            return self.kernel
        return JobKernel(self.account, slug)

    def _superseded(self, handle: KaggleHandle) -> bool:
        """A later segment was pushed on this kernel (by this one, self-chaining)."""
        current = self._kernel_of(handle).current_launch()
        return current is not None and segment_of(current[0]) > handle.segment_index

    def collect(self, handle: str, store: Path) -> Collected:
        decoded = KaggleHandle.decode(handle)
        staging = self.workdir / "output" / store.name
        fetched = 0
        if not store.exists():
            problem, fetched = self._fetch(decoded, staging)
            if problem is not None:
                return Collected(None, None, None, None, problem)
        try:
            result = SegmentResult.read(staging / RESULT_FILE)
        except FileNotFoundError as exc:
            cut = _cut_result(staging, decoded)
            if cut is None:
                return Collected(None, None, None, None, f"no usable {RESULT_FILE}: {exc}")
            result = cut
        except (OSError, ValueError, TypeError) as exc:
            return Collected(None, None, None, None, f"no usable {RESULT_FILE}: {exc}")
        mismatch = _foreign_result(result, decoded)
        if mismatch is not None:
            shutil.rmtree(staging, ignore_errors=True)
            return Collected(None, None, None, None, mismatch)
        if not result.committed:
            return Collected(result, None, None, None, result.error or result.outcome)
        expect = CheckpointRef(result.job_id, result.segment_index, result.end_step)
        transport = ORCHESTRATOR
        try:
            if not store.exists() and (staging / PUBLISH_FILE).is_file():
                adopted, fetched = self._adopt_published(decoded, staging, store, expect, fetched)
                if adopted is not None:
                    transport = KERNEL
                    result = _with_publish_time(result, adopted.seconds)
            if not store.exists():
                self._take_checkpoint(staging / CHECKPOINT_DIR, store, expect)
            manifest = verify_stored(store, expect)
            if read_remote(store) is not None and transport == ORCHESTRATOR:
                # A collect retried after the stub was kept: the session's publishing still
                # counts as its upload (the planner's margin), as it did the first time.
                transport = KERNEL
                with contextlib.suppress(CorruptCheckpoint):
                    seconds = Published.read(staging / PUBLISH_FILE).seconds
                    result = _with_publish_time(result, seconds)
            if result.outcome == Outcome.COMPLETED:
                # The final model is what a user downloads: fetched here once, every file
                # verified, before the job's datasets on Kaggle are deleted.
                final_dataset, held = self._hold_final(decoded, staging, store, expect)
                fetched += held
                self._release_finished_job(final_dataset)
        except CorruptCheckpoint as exc:
            return Collected(result, None, None, None, f"checkpoint rejected: {exc}")
        moved = fetched
        if transport == ORCHESTRATOR and result.outcome != Outcome.COMPLETED:
            # ...and the next launch uploads the same checkpoint again.
            moved += manifest.total_bytes
        return Collected(result, manifest, store, None, None, transport, moved)

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        """Download the dataset version a stub names into the store, in place of the stub, once
        every file verifies against the manifest the stub kept (a download that fails is fetched
        again, DOWNLOAD_ATTEMPTS times in all); the bytes downloaded. CorruptCheckpoint when
        Kaggle's copy never verifies or is gone (its dataset deleted)."""
        remote = read_remote(stored)
        if remote is None:
            return 0
        owner, _, slug = remote.dataset_ref.partition("/")
        if owner != self.account.username:
            raise CorruptCheckpoint(
                f"{remote.dataset_ref} is not on {self.account.username}'s account"
            )
        dataset = CheckpointDataset(self.account, slug, self.workdir / "publish")
        staging = self.workdir / "fetch" / stored.name
        fetched, problem = 0, ""
        for _ in range(DOWNLOAD_ATTEMPTS):
            try:
                dataset.download_segment(remote.version, expect.segment_index, staging)
            except Gone as exc:
                raise CorruptCheckpoint(f"{remote.dataset_ref} v{remote.version}: {exc}") from exc
            fetched += _tree_bytes(staging)
            try:
                verify_checkpoint(staging / CHECKPOINT_DIR, expect)
                # ...and it is the very checkpoint the published copy was checked as.
                if sha256_file(staging / CHECKPOINT_DIR / MANIFEST_FILE) != remote.manifest_sha256:
                    raise CorruptCheckpoint("its manifest is not the one the stub kept")
            except CorruptCheckpoint as exc:
                problem = str(exc)
                continue
            _replace_dir(staging / CHECKPOINT_DIR, stored)
            shutil.rmtree(staging, ignore_errors=True)
            return fetched
        shutil.rmtree(staging, ignore_errors=True)
        raise CorruptCheckpoint(
            f"{remote.dataset_ref} v{remote.version} failed verification {DOWNLOAD_ATTEMPTS} "
            f"times: {problem}"
        )

    def _hold_final(
        self, handle: KaggleHandle, staging: Path, store: Path, expect: CheckpointRef
    ) -> tuple[str | None, int]:
        """The job's final checkpoint, held in the store: fetched from the dataset its session
        published (whose slug is returned, to be deleted with the rest), or, where that copy
        fails verification, from the session's output (today's path); the bytes downloaded."""
        remote = read_remote(store)
        if remote is None:
            return None, 0
        slug = remote.dataset_ref.partition("/")[2]
        try:
            return slug, self.fetch_checkpoint(store, expect)
        except CorruptCheckpoint as exc:
            log.warning("the published final checkpoint is unusable (%s); fetching the output", exc)
        problem, fetched = self._download(staging, self._kernel_of(handle), handle.version)
        if problem is not None:
            raise CorruptCheckpoint(problem)
        taken = staging.with_name(f"{staging.name}.final")
        shutil.rmtree(taken, ignore_errors=True)
        self._take_checkpoint(staging / CHECKPOINT_DIR, taken, expect)
        _replace_dir(taken, store)
        return slug, fetched

    def _fetch(self, handle: KaggleHandle, staging: Path) -> tuple[str | None, int]:
        """The segment's result and checkpoint into `staging`; a reason when there are none, and
        the bytes downloaded.

        A self-chaining segment published both in the checkpoint dataset, the only place left
        once its successor's version has replaced its output. A segment that published its own
        checkpoint leaves it out of what is downloaded (`_lean`).
        """
        if self.options.self_chain:
            version = self.dataset.find_segment(handle.segment_index)
            if version is not None:
                self.dataset.download_segment(version, handle.segment_index, staging)
                return None, _tree_bytes(staging)
            if self._superseded(handle):
                return "the segment's output was replaced by a later version and not published", 0
        skip = _lean if self.options.kernel_transport else None
        return self._download(staging, self._kernel_of(handle), handle.version, skip)

    def _download(
        self,
        staging: Path,
        kernel: JobKernel,
        version: int | None,
        skip: Callable[[set[str], str], bool] | None = None,
    ) -> tuple[str | None, int]:
        """Fetch one version's output into `staging`; a reason when there is none to use."""
        status, message = kernel.status(version)
        shutil.rmtree(staging, ignore_errors=True)
        fetched = kernel.download_output(staging, version, skip)
        if (staging / RESULT_FILE).exists():
            return None, fetched
        if (staging / CHECKPOINT_DIR).is_dir():
            # A session cut at its limit ends CANCEL_ACKNOWLEDGED and keeps its partial output
            # (issue 17): a checkpoint committed before the cut is committed work; collect
            # verifies it.
            return None, fetched
        if status is KernelStatus.CANCELLED:
            return "the kernel session was cancelled; its output is lost", fetched
        return f"the kernel left no {RESULT_FILE} ({status}: {message or 'no output'})", fetched

    def _adopt_published(
        self,
        handle: KaggleHandle,
        staging: Path,
        store: Path,
        expect: CheckpointRef,
        fetched: int,
    ) -> tuple[Published | None, int]:
        """Keep a stub of the checkpoint the session published, once the copy on Kaggle checks
        out (`check_published`); where it does not, download the output's own copy instead
        (today's path). Transient while Kaggle still processes the version."""
        checkpoint = staging / CHECKPOINT_DIR
        try:
            published = Published.read(staging / PUBLISH_FILE)
            dataset = CheckpointDataset(
                self.account, published.dataset_slug, self.workdir / "publish"
            )
            copy, sampled = check_published(dataset, published, checkpoint, expect, staging)
        except CorruptCheckpoint as exc:
            log.warning("published checkpoint unusable (%s); fetching the output's copy", exc)
            problem, more = self._download(staging, self._kernel_of(handle), handle.version)
            if problem is not None:
                raise CorruptCheckpoint(problem) from exc
            return None, fetched + more
        write_stub(store, checkpoint / MANIFEST_FILE, copy)
        return published, fetched + sampled

    def _take_checkpoint(self, source: Path, store: Path, expect: CheckpointRef) -> None:
        # Beside the staging folder, not in it: every fetch starts by emptying the staging folder.
        staging = source.parent
        attempts_file = staging.parent / f".{staging.name}.verify-attempts"
        try:
            verify_checkpoint(source, expect)
        except CorruptCheckpoint:
            # The client writes whatever a download returned, error pages included: fetch again.
            attempts = int(attempts_file.read_text()) + 1 if attempts_file.exists() else 1
            if attempts >= DOWNLOAD_ATTEMPTS:
                raise
            attempts_file.write_text(str(attempts))
            shutil.rmtree(source, ignore_errors=True)
            (source.parent / RESULT_FILE).unlink(missing_ok=True)
            raise Transient("downloaded checkpoint failed verification") from None
        store.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, store)
        attempts_file.unlink(missing_ok=True)

    # --- steering -------------------------------------------------------------------------

    @property
    def slot(self) -> Slot:
        if self.options.uses_gpu:
            return Slot(f"kaggle:{self.account.username}:gpu", GPU_SESSIONS_PER_ACCOUNT)
        return Slot(f"kaggle:{self.account.username}:cpu", CPU_SESSIONS_PER_ACCOUNT)

    @property
    def _listens(self) -> bool:
        """Whether the job's kernels poll its control channel (they need internet for it)."""
        return self.options.enable_internet and self.options.control_poll_seconds > 0

    def _tell(self, handle: str, command: Command) -> None:
        decoded = KaggleHandle.decode(handle)
        if self._listens and decoded.job_id:
            self.control.tell(command, str(LaunchId(decoded.job_id, decoded.segment_index)))

    def cancel(self, handle: str) -> bool:
        """Kaggle's API cannot stop a batch session: its id is never exposed (kaggle-cli #1169,
        #1170, #1174). A kernel with internet hears `cancel` on the job's control channel and
        ends within its poll interval (if its BATON_KAGGLE_KEY Secret is attached); any other
        runs on until it ends or its owner stops it on kaggle.com. Either way its end is only
        known once `status` sees it."""
        self._tell(handle, Command.CANCEL)
        return False

    def request_stop(self, handle: str) -> None:
        """A kernel with internet hears `pause` on the control channel, commits and ends; any
        other pauses when its segment ends."""
        self._tell(handle, Command.PAUSE)

    def progress(self, handle: str) -> Heartbeat | None:
        """Nothing reaches into a running kernel."""
        return None

    def queue_reason(self, handle: str) -> str | None:
        return None  # Kaggle says nothing of why a kernel is still queued

    def log_file(self, handle: str) -> Path | None:
        """The log Kaggle kept with the output, once collected (a running kernel's is not
        readable through the API)."""
        decoded = KaggleHandle.decode(handle)
        slug = self._kernel_of(decoded).slug
        return self.workdir / "output" / f"{decoded.segment_index:05d}" / f"{slug}.log"

    def quota(self) -> Quota | None:
        if self.options.accelerator is Accelerator.NONE:
            return None
        request = ApiGetAcceleratorQuotaStatisticsRequest()
        stats = self.account.call(
            "GetAcceleratorQuotaStatistics",
            lambda c: c.kernels.kernels_api_client.get_accelerator_quota_statistics(request),
        )
        quota = stats.tpu_quota if self.options.accelerator is Accelerator.TPU else stats.gpu_quota
        if quota is None:
            return None
        # proto3 omits zero durations: a user who never ran a GPU session has no timeUsed.
        left = (
            _seconds(quota.total_time_allowed)
            - _seconds(quota.time_used)
            - _seconds(quota.time_reserved)
            - self.options.quota_reserve_seconds
        )
        refresh = stats.quota_refresh_time
        if refresh is not None and refresh.tzinfo is None:
            refresh = refresh.replace(tzinfo=UTC)
        return Quota(seconds_left=max(0.0, left), refresh_at=refresh)


def _seconds(duration: timedelta | None) -> float:
    return duration.total_seconds() if duration is not None else 0.0


def _lean(listed: set[str], name: str) -> bool:
    """Leave out the checkpoint's files where the session published it (all but its manifest):
    the orchestrator checks the published copy instead of downloading this one."""
    return (
        PUBLISH_FILE in listed
        and name.startswith(f"{CHECKPOINT_DIR}/")
        and name != f"{CHECKPOINT_DIR}/{MANIFEST_FILE}"
    )


def _replace_dir(source: Path, target: Path) -> None:
    """Put directory `source` where `target` is, the old one moved aside first (a directory
    cannot be renamed over a non-empty one)."""
    aside = target.with_name(f".{target.name}.replaced")
    shutil.rmtree(aside, ignore_errors=True)
    if target.exists():
        target.rename(aside)
    source.rename(target)
    shutil.rmtree(aside, ignore_errors=True)


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _with_publish_time(result: SegmentResult, seconds: float) -> SegmentResult:
    """The session's time spent publishing counts as its upload (the planner's margin)."""
    return replace(result, timings=replace(result.timings, upload=seconds))


def _cut_result(staging: Path, handle: KaggleHandle) -> SegmentResult | None:
    """The result of a session cut before it wrote result.json, from the checkpoint it had
    committed (its manifest names job, segment and step; collect verifies every file)."""
    try:
        manifest = read_manifest(staging / CHECKPOINT_DIR)
    except (CorruptCheckpoint, OSError, ValueError):
        return None
    return SegmentResult(
        job_id=manifest.job_id,
        segment_index=manifest.segment_index,
        outcome=Outcome.STOPPED,
        start_step=handle.start_step,
        end_step=manifest.step,
        limit_seconds=handle.limit_seconds,
        model_digest=manifest.model_digest,
    )


def _foreign_result(result: SegmentResult, handle: KaggleHandle) -> str | None:
    """Why this result.json is not the handle's segment's (another version's output), if not."""
    if handle.job_id and (result.job_id, result.segment_index) != (
        handle.job_id,
        handle.segment_index,
    ):
        return (
            f"{RESULT_FILE} belongs to job {result.job_id} segment {result.segment_index}, "
            f"not to segment {handle.segment_index}: Kaggle served another version's output"
        )
    return None
