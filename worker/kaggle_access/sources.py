"""Checks a job's own dataset sources before a kernel is pushed with them.

A push with a source Kaggle cannot mount still starts a session (the source is only reported in
`invalidDatasetSources`), and that session cannot be stopped through the API. So every source the
user named must exist, be visible to the job owner's credentials and have the version it names
(or its latest) READY before anything is pushed. A version still processing waits; one that
FAILED or was DELETED, or a dataset the owner cannot see, refuses the launch with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from kagglesdk.datasets.types.dataset_api_service import ApiDataset

from worker.boundary.errors import Rejected, Transient
from worker.kaggle_access.client import KaggleAccount, KaggleAuthError, KaggleNotFound

READY = "READY"
LOST = frozenset({"FAILED", "DELETED"})


@dataclass(frozen=True)
class DatasetSource:
    """`owner/slug` or `owner/slug/N` as a job names it."""

    owner: str
    slug: str
    version: int | None

    @classmethod
    def parse(cls, ref: str) -> DatasetSource:
        owner, slug, *rest = ref.split("/")
        return cls(owner, slug, int(rest[0]) if rest else None)

    def __str__(self) -> str:
        pinned = "" if self.version is None else f"/{self.version}"
        return f"{self.owner}/{self.slug}{pinned}"


def source_problem(source: DatasetSource, dataset: ApiDataset) -> tuple[str, bool] | None:
    """Why `dataset` cannot be mounted as `source` yet, and whether that is final; None if it can.

    Pure: reads the GetDataset answer only. proto3 omits a zero version number, and a dataset
    with no versions listed has nothing to mount.
    """
    versions = {v.version_number: (v.status or "").upper() for v in dataset.versions or []}
    number = source.version if source.version is not None else dataset.current_version_number
    if not number and versions:
        number = max(versions)
    if not number or number not in versions:
        return f"{source}: Kaggle lists no such version", True
    status = versions[number]
    if status == READY:
        return None
    if status in LOST:
        return f"{source}: version {number} is {status} on Kaggle", True
    return f"{source}: version {number} is still processing ({status or 'no status'})", False


def check_dataset_sources(account: KaggleAccount, sources: list[str]) -> None:
    """Raise Rejected or Transient unless every source can be mounted now, as `account`."""
    for ref in sources:
        source = DatasetSource.parse(ref)
        try:
            dataset = account.dataset(source.slug, source.owner)
        except (KaggleNotFound, KaggleAuthError) as exc:
            raise Rejected(
                f"dataset source {source} does not exist or is not visible to "
                f"{account.username}'s Kaggle credentials"
            ) from exc
        problem = source_problem(source, dataset)
        if problem is None:
            continue
        reason, final = problem
        if final:
            raise Rejected(f"dataset source {reason}")
        raise Transient(f"dataset source {reason}")
