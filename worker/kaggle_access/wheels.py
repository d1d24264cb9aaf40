"""A job's requirements kept built on Kaggle: the wheel set dataset (worker/wheelhouse.py).

One private dataset per (requirements, image), named by the orchestrator, shared by every job of
the account with the same ones. A session that built the set publishes it through the same
uploader as its checkpoints (`checkpoints.upload_folder`); the orchestrator mounts the newest
READY version into every later push. Nothing here retries: a wheel set that is not published
this session is built again by the next one, which costs that session what every session paid
before.
"""

from __future__ import annotations

from pathlib import Path

from worker.kaggle_access.checkpoints import READY, upload_folder
from worker.kaggle_access.client import KaggleAccount

NOTES = "baton wheel set"


class WheelSetDataset:
    def __init__(self, account: KaggleAccount, slug: str) -> None:
        self.account = account
        self.slug = slug

    @property
    def ref(self) -> str:
        return f"{self.account.username}/{self.slug}"

    def ready(self) -> bool:
        """Whether a version of the set is READY to be mounted (one GetDataset call)."""
        dataset = self.account.own_dataset(self.slug)
        versions = dataset.versions or [] if dataset is not None else []
        return any((v.status or "").upper() == READY for v in versions)

    def publish(self, folder: Path) -> None:
        """Send the built set as the dataset's first version, or as a new one where an older
        set (another interpreter's) is there: the newest version is the one mounted."""
        dataset = self.account.own_dataset(self.slug)
        upload_folder(self.account, self.ref, folder, NOTES, exists=dataset is not None, busy=False)
