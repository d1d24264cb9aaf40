"""The in-kernel transport: the session publishes its own checkpoint before it exits.

With internet on and the user's key attached as a Kaggle Secret (what self-chaining needs too),
the kernel uploads its committed checkpoint as the dataset the orchestrator named for it
(`publish_dataset`, one per checkpoint, so retention can delete old ones), through the official
client, and writes `publish.json` into its output. It stops once Kaggle has accepted the upload:
processing goes on after the session, and the orchestrator waits for it, so no session time is
spent waiting. The checkpoint stays in the output too: whatever goes wrong here (no Secret, a
refusal, the deadline), the orchestrator falls back to downloading it, today's path.

The session writes the checkpoint once: what is uploaded is its committed files themselves,
linked into a staging folder under their flat names (worker/boundary/version_layout.py), not a
copy; only a checkpoint of more files than a dataset version holds is packed into an archive.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

from worker.boundary.contract import CheckpointRef, SegmentResult
from worker.boundary.errors import Rejected, Transient
from worker.boundary.kernel_options import Publish
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE
from worker.boundary.transport import PUBLISH_FILE, Published
from worker.boundary.version_layout import published_name
from worker.kaggle_access.before_deadline import TooLate, call_before
from worker.kaggle_access.chaining import RETRY_CAP_SECONDS, RETRY_SECONDS, secret_key
from worker.kaggle_access.checkpoints import CheckpointDataset
from worker.kaggle_access.client import KaggleAccount, KaggleNotFound, production_client

log = logging.getLogger("worker.kaggle.publish")


def publish_checkpoint(publish: Publish, working: Path, deadline: float) -> bool:
    """Upload the committed checkpoint; True once Kaggle accepted it and publish.json says so."""
    result = SegmentResult.read(working / RESULT_FILE)
    if not result.committed:
        return False
    key = secret_key()
    if key is None:
        return False
    started = time.time()
    expect = CheckpointRef(result.job_id, result.segment_index, result.end_step)
    checkpoint = working / CHECKPOINT_DIR
    name = published_name(expect, checkpoint)
    account = KaggleAccount(publish.username, key, production_client)
    # Outside the output; the links in it write none of the checkpoint's bytes again.
    staging = Path(tempfile.mkdtemp(prefix="baton-publish-"))
    dataset = CheckpointDataset(account, publish.dataset, staging)
    delay = RETRY_SECONDS
    abandoned = False
    try:
        while time.time() < deadline:
            try:
                call_before(
                    deadline,
                    lambda: dataset.ensure_published(expect, checkpoint, working / RESULT_FILE),
                )
                break  # READY already (a retried session whose upload took effect)
            except TooLate:
                # The call goes on reading the staged links until the session ends.
                abandoned = True
                log.warning("the upload outlasted the session; the orchestrator fetches it")
                return False
            except Transient as exc:
                if dataset.upload_confirmed(name):
                    break  # accepted: Kaggle processes it after the session
                log.info("publishing: %s", exc)
                wait = max(delay, exc.retry_after or 0.0)
                time.sleep(max(0.0, min(wait, deadline - time.time())))
                delay = min(delay * 2, RETRY_CAP_SECONDS)
        else:
            log.warning("the checkpoint was not published in time; the orchestrator fetches it")
            return False
        size = dataset.staged_bytes(name)
        seconds = time.time() - started
        Published(dataset.slug, name, size, seconds).write(working / PUBLISH_FILE)
        log.info("published %s (%d bytes) in %.1f s", name, size, seconds)
        return True
    except (Rejected, KaggleNotFound) as exc:
        log.warning("publishing stopped: %s; the orchestrator fetches the checkpoint", exc)
        return False
    finally:
        if not abandoned:
            shutil.rmtree(staging, ignore_errors=True)
