"""A job's own dataset sources are checked before its kernel is pushed: missing, another user's
private dataset, a version still processing (waits) and a FAILED one (refused)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kagglesdk.datasets.types.dataset_api_service import ApiDataset, ApiDatasetVersion
from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus

from orchestrator.backends.base import LaunchRequest, Rejected, Transient
from orchestrator.backends.kaggle.backend import KaggleBackend
from orchestrator.spec import JobSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, ManualClock, start_emulator
from tests.support.kaggle import account_on
from tests.support.marks import starts_processes
from worker.contract import SegmentSpec
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.sources import DatasetSource, check_dataset_sources, source_problem

USERS = {"alice": "alice-key", "bob": "bob-key"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
@starts_processes
def two_users(tmp_path: Path, clock: ManualClock) -> Iterator[Emulator]:
    options = FAST_EMULATOR | {"dataset_processing_seconds": 60.0, "dataset_not_found_seconds": 0}
    with start_emulator(tmp_path / "emulator", users=USERS, clock=clock, **options) as emulator:
        yield emulator
        assert emulator.internal_errors == []


def _create(emulator: Emulator, tmp_path: Path, ref: str, *, private: bool = True) -> None:
    owner, slug = ref.split("/")
    folder = tmp_path / "upload" / slug
    folder.mkdir(parents=True)
    meta = {"id": ref, "title": slug, "licenses": [{"name": "CC0-1.0"}]}
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    (folder / "data.txt").write_text("rows")
    emulator.kaggle_api(owner).dataset_create_new(str(folder), public=not private, quiet=True)


def _dataset(statuses: dict[int, str], current: int | None = None) -> ApiDataset:
    dataset = ApiDataset()
    dataset.versions = []
    for number, status in statuses.items():
        version = ApiDatasetVersion()
        version.version_number, version.status = number, status
        dataset.versions.append(version)
    if current is not None:
        dataset.current_version_number = current
    return dataset


@pytest.mark.parametrize("status", [s.name for s in DatabundleVersionStatus])
def test_only_a_ready_version_is_mountable_and_only_failed_or_deleted_is_final(
    status: str,
) -> None:
    problem = source_problem(DatasetSource.parse("bob/data"), _dataset({1: status}, 1))
    if status == "READY":
        assert problem is None
    else:
        assert problem is not None
        assert problem[1] is (status in {"FAILED", "DELETED"})


def test_a_pinned_version_is_judged_by_itself_and_a_missing_one_is_refused() -> None:
    dataset = _dataset({1: "READY", 2: "FAILED"}, current=2)
    assert source_problem(DatasetSource.parse("bob/data/1"), dataset) is None
    assert source_problem(DatasetSource.parse("bob/data"), dataset) == (
        "bob/data: version 2 is FAILED on Kaggle",
        True,
    )
    assert source_problem(DatasetSource.parse("bob/data/3"), dataset) == (
        "bob/data/3: Kaggle lists no such version",
        True,
    )


def test_a_missing_dataset_is_refused_with_the_reason(two_users: Emulator) -> None:
    alice = account_on(two_users)
    with pytest.raises(Rejected, match="alice/no-such-data does not exist or is not visible"):
        check_dataset_sources(alice, ["alice/no-such-data"])


def test_another_users_private_dataset_is_refused(
    two_users: Emulator, tmp_path: Path, clock: ManualClock
) -> None:
    _create(two_users, tmp_path, "bob/secret-data")
    clock.advance(61)
    bob = account_on(two_users, "bob", "bob-key")
    check_dataset_sources(bob, ["bob/secret-data"])  # its owner may mount it
    with pytest.raises(Rejected, match="not visible to alice's Kaggle credentials"):
        check_dataset_sources(account_on(two_users), ["bob/secret-data"])


def test_a_version_still_processing_waits_then_passes(
    two_users: Emulator, tmp_path: Path, clock: ManualClock
) -> None:
    _create(two_users, tmp_path, "bob/public-data", private=False)
    alice = account_on(two_users)
    with pytest.raises(Transient, match="version 1 is still processing"):
        check_dataset_sources(alice, ["bob/public-data/1"])
    clock.advance(61)
    check_dataset_sources(alice, ["bob/public-data/1", "bob/public-data"])


def test_a_failed_version_is_refused(
    two_users: Emulator, tmp_path: Path, clock: ManualClock
) -> None:
    two_users.faults.dataset_outcomes = ["FAILED"]
    _create(two_users, tmp_path, "alice/broken-data")
    clock.advance(61)
    with pytest.raises(Rejected, match="alice/broken-data: version 1 is FAILED"):
        check_dataset_sources(account_on(two_users), ["alice/broken-data"])


def test_a_bad_source_refuses_the_launch_before_any_push(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    spec = JobSpec.model_validate(kaggle_spec({"dataset_sources": ["alice/no-such-data"]}))
    assert spec.kaggle is not None
    backend = KaggleBackend(alice, "j1", spec.kaggle, tmp_path / "kaggle" / "j1")
    segment = SegmentSpec("j1", 0, spec.trainer, {}, 10, 20.0)
    with pytest.raises(Rejected, match="alice/no-such-data"):
        backend.launch(LaunchRequest("j1-00000", segment, None))
    assert emulator.push_counts == {}
