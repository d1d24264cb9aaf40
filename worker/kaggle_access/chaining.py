"""Self-chaining, inside a kernel: publish this segment's checkpoint, then push its successor.

The chain then goes on while the orchestrator is offline; when it is back, it adopts each pushed
segment by its launch id (worker.boundary.launch_id, which it uses itself), so nothing is pushed
twice. The key comes only from a Kaggle Secret the user attached to the kernel, never from the
kernel's source. Anything that goes wrong here just ends the chain: the orchestrator carries on
from the last published checkpoint.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from worker.boundary.contract import CheckpointRef, Outcome, SegmentResult, SegmentSpec
from worker.boundary.errors import Gone, Rejected, Transient
from worker.boundary.kernel_options import KernelOptions
from worker.boundary.launch_id import LaunchId
from worker.boundary.manifest import read_manifest
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE
from worker.boundary.planning import successor_spec
from worker.kaggle_access.before_deadline import TooLate, call_before
from worker.kaggle_access.checkpoints import CheckpointDataset, PublishedCheckpoint
from worker.kaggle_access.client import KaggleAccount, KaggleNotFound, production_client
from worker.kaggle_access.kernel_script import kernel_source
from worker.kaggle_access.kernels import JobKernel, KernelPush
from worker.kaggle_access.secrets import SECRET_LABEL as SECRET_LABEL  # re-exported
from worker.kaggle_access.secrets import read_secret
from worker.kaggle_access.successor import checkpoint_source, quota_left, successor_seconds
from worker.kaggle_access.wheels import WheelSetDataset

# Publishing retries are spaced (Kaggle rate-limits): from the first delay, doubling to the cap,
# or as long as a 429's Retry-After asks.
RETRY_SECONDS = 2.0
RETRY_CAP_SECONDS = 30.0

log = logging.getLogger("worker.kaggle.chain")


def secret_key() -> str | None:
    value = read_secret(SECRET_LABEL)
    if value is None:
        log.warning("no Kaggle Secret %s readable; the orchestrator chains", SECRET_LABEL)
    return value


def _publish(
    dataset: CheckpointDataset, expect: CheckpointRef, working: Path, give_up_at: float
) -> PublishedCheckpoint | None:
    delay = RETRY_SECONDS
    while time.time() < give_up_at:
        try:
            return call_before(
                give_up_at,
                lambda: dataset.ensure_published(
                    expect, working / CHECKPOINT_DIR, working / RESULT_FILE
                ),
            )
        except TooLate:
            log.warning("the upload outlasted the session; the orchestrator chains")
            return None
        except Transient as exc:
            log.info("publishing: %s", exc)
            wait = max(delay, exc.retry_after or 0.0)
            time.sleep(max(0.0, min(wait, give_up_at - time.time())))
            delay = min(delay * 2, RETRY_CAP_SECONDS)
    log.warning("the checkpoint was not ready to mount in time; the orchestrator chains")
    return None


def chain(
    segment: dict[str, Any], options: KernelOptions, code: bytes, working: Path, deadline: float
) -> None:
    """Publish the committed checkpoint and push the next segment, if there is one to push."""
    result = SegmentResult.read(working / RESULT_FILE)
    link = options.chain
    if link is None or result.outcome not in (Outcome.DEADLINE, Outcome.COMPLETED):
        return
    key = secret_key()
    if key is None:
        return
    started = time.time()
    account = KaggleAccount(link.username, key, production_client)
    expect = CheckpointRef(result.job_id, result.segment_index, result.end_step)
    staging = Path(tempfile.mkdtemp(prefix="baton-publish-"))
    dataset = CheckpointDataset(account, options.checkpoint_dataset, staging)
    try:
        published = _publish(dataset, expect, working, deadline)
        if published is None or result.outcome == Outcome.COMPLETED:
            return
        spec = successor_spec(
            SegmentSpec.from_dict(segment),
            result,
            expect,
            time.time() - started,
            read_manifest(working / CHECKPOINT_DIR).total_bytes,
        )
        push = KernelPush(**link.push)
        # Sized to the quota the account has left now, as the orchestrator sizes its pushes.
        seconds = successor_seconds(
            push.timeout_seconds,
            quota_left(account, link),
            result,
            link,
            time.time() - started,
        )
        if seconds is None:
            log.info("too little quota left for a session; the orchestrator waits for the refresh")
            return
        spec = replace(spec, limit_seconds=float(seconds))
        next_options = replace(options, checkpoint_file=published.file_name)
        source_ref = checkpoint_source(dataset.ref, published.version, link)
        push = replace(
            push, timeout_seconds=seconds, dataset_sources=[source_ref, *push.dataset_sources]
        )
        next_options, push = mount_wheel_set(account, next_options, push)
        launch_id = str(LaunchId(spec.job_id, spec.segment_index))
        source = kernel_source(launch_id, spec, next_options, code)
        JobKernel(account, link.kernel_slug).push(source, push)
        log.info(
            "pushed segment %d (%.1f s after commit)", spec.segment_index, time.time() - started
        )
    except (Transient, Rejected, KaggleNotFound) as exc:
        log.warning("self-chaining stopped: %s; the orchestrator chains", exc)


def mount_wheel_set(
    account: KaggleAccount, options: KernelOptions, push: KernelPush
) -> tuple[KernelOptions, KernelPush]:
    """The successor's options and push, mounting the job's wheel set once it is READY (a set
    this chain built after the orchestrator's push), for it and every successor after it."""
    wheels, link = options.wheels, options.chain
    if wheels is None or wheels.attached or link is None:
        return options, push
    try:
        ready = WheelSetDataset(account, wheels.dataset).ready()
    except (Transient, Rejected, Gone) as exc:
        log.info("the wheel set could not be looked up (%s); the successor builds it", exc)
        return options, push
    if not ready:
        return options, push
    ref = f"{wheels.username}/{wheels.dataset}"
    sources = [*link.push.get("dataset_sources", []), ref]
    chained = replace(link, push={**link.push, "dataset_sources": sources})
    attached = replace(options, wheels=replace(wheels, attached=True), chain=chained)
    return attached, replace(push, dataset_sources=[*push.dataset_sources, ref])
