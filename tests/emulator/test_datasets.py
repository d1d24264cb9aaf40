"""Datasets through KaggleApi's real blob upload flow: processing, 403, 404, dir_mode, mounts."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import pytest
from kagglesdk import KaggleClient
from kagglesdk.datasets.types.dataset_api_service import (
    ApiGetDatasetStatusRequest,
    ApiListDatasetFilesRequest,
)
from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus
from kagglesdk.kernels.types.kernels_enums import KernelWorkerStatus as S
from requests import HTTPError

from tests.emulator import calls
from tests.emulator.calls import TERMINAL
from tests.kaggle_emulator import Emulator
from tests.kaggle_emulator.blobs import Blob
from tests.kaggle_emulator.datasets import (
    MAX_FILES_PER_VERSION,
    PROCESSING_STAGES,
    Dataset,
    DatasetRegistry,
    DatasetTiming,
    TooManyFiles,
)


def _folder(path: Path, slug: str, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    meta = {"id": f"alice/{slug}", "title": f"Title {slug}", "licenses": [{"name": "CC0-1.0"}]}
    (path / "dataset-metadata.json").write_text(json.dumps(meta))
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    return path


def _status(client: KaggleClient, slug: str) -> DatabundleVersionStatus:
    request = ApiGetDatasetStatusRequest()
    request.owner_slug, request.dataset_slug = "alice", slug
    return client.datasets.dataset_api_client.get_dataset_status(request).status


def _wait_ready(client: KaggleClient, slug: str) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            current = _status(client, slug).name
        except HTTPError as error:
            current = str(error.response.status_code)
        if not seen or seen[-1] != current:
            seen.append(current)
        if current == "READY":
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{slug} never became ready: {seen}")


def _stage_order(name: str) -> int:
    return [*PROCESSING_STAGES, "READY"].index(name)


def _wait_version_listed(client: KaggleClient, slug: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            _status(client, slug)
            return
        except HTTPError as error:
            if error.response.status_code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _wait_version(client: KaggleClient, slug: str, number: int) -> None:
    """GetDatasetStatus reads the last visible version, so wait on the version itself."""
    deadline = time.monotonic() + 10
    while True:
        try:
            _file_names(client, slug, number)
            return
        except HTTPError as error:
            if error.response.status_code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _file_names(client: KaggleClient, slug: str, version: int | None = None) -> list[str]:
    request = ApiListDatasetFilesRequest()
    request.owner_slug, request.dataset_slug = "alice", slug
    request.dataset_version_number = version
    response = client.datasets.dataset_api_client.list_dataset_files(request)
    return [f.name for f in response.dataset_files]


def test_create_then_version_via_blob_upload(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    api = emulator.kaggle_api()
    folder = _folder(tmp_path / "v1", "checkpoints", {"step.txt": "1", "ckpt/model.bin": "w1"})
    created = api.dataset_create_new(str(folder), dir_mode="zip", quiet=True)
    assert created.status == "Ok"
    assert not created.error
    # While the FIRST version processes, a new version is refused with 403 (kagglehub #182).
    _wait_version_listed(client, "checkpoints")
    with pytest.raises(HTTPError) as busy:
        api.dataset_create_version(str(folder), "too soon", quiet=True, dir_mode="zip")
    assert busy.value.response.status_code == 403

    seen = _wait_ready(client, "checkpoints")
    # DatabundleVersionStatus's processing stages, in order, then READY.
    stages = [s for s in seen if s != "404"]
    assert stages[-1] == "READY"
    assert stages == sorted(stages, key=_stage_order)
    assert set(stages) - {"READY"} <= set(PROCESSING_STAGES)
    assert len(stages) >= 2
    assert _file_names(client, "checkpoints") == ["ckpt/model.bin", "step.txt"]

    (folder / "step.txt").write_text("2")
    second = api.dataset_create_version(str(folder), "segment 2", quiet=True, dir_mode="zip")
    assert second.status == "Ok"
    # Once one version is READY, versions may be created while others still process.
    third = api.dataset_create_version(str(folder), "right after", quiet=True, dir_mode="zip")
    assert third.status == "Ok"
    _wait_version(client, "checkpoints", 3)
    assert [v.number for v in emulator.dataset("alice/checkpoints").versions] == [1, 2, 3]

    api.dataset_download_files("alice/checkpoints", path=str(tmp_path / "dl"), unzip=True)
    assert (tmp_path / "dl" / "step.txt").read_text() == "2"
    assert (tmp_path / "dl" / "ckpt" / "model.bin").read_text() == "w1"
    api.dataset_download_files("alice/checkpoints/1", path=str(tmp_path / "old"))
    with zipfile.ZipFile(tmp_path / "old" / "checkpoints.zip") as archive:
        assert archive.read("step.txt") == b"1"


def test_dir_mode_skip_drops_subfolders(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    folder = _folder(tmp_path / "d", "skipped", {"top.txt": "t", "sub/inner.txt": "i"})
    emulator.kaggle_api().dataset_create_new(str(folder), quiet=True)
    _wait_ready(client, "skipped")
    assert _file_names(client, "skipped") == ["top.txt"]


def test_a_kernel_reads_a_mounted_dataset(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    folder = _folder(tmp_path / "d", "resume-from", {"state.json": '{"step": 7}'})
    emulator.kaggle_api().dataset_create_new(str(folder), quiet=True)
    _wait_ready(client, "resume-from")
    script = (
        "import json, os\n"
        "root = os.environ['BATON_KAGGLE_ROOT']\n"
        # Newer images mount at input/datasets/<owner>/<slug> (the emulator's default layout).
        "path = os.path.join(root, 'input', 'datasets', 'alice', 'resume-from', 'state.json')\n"
        "state = json.load(open(path))\n"
        "open('next.txt', 'w').write(str(state['step'] + 1))\n"
    )
    response = calls.push(client, "alice/reader", script, datasets=["alice/resume-from"])
    assert response.invalid_dataset_sources == []
    final, _ = calls.wait_for(client, "alice/reader", TERMINAL)
    assert final.status == S.COMPLETE, final.failure_message
    emulator.kaggle_api().kernels_output("alice/reader", str(tmp_path / "out"))
    assert (tmp_path / "out" / "next.txt").read_text() == "8"


def test_unknown_or_unready_source_is_reported_invalid_and_not_mounted(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    folder = _folder(tmp_path / "d", "fresh-data", {"a.txt": "a"})
    emulator.kaggle_api().dataset_create_new(str(folder), quiet=True)
    script = "import os\nprint(os.listdir(os.environ['BATON_KAGGLE_ROOT'] + '/input'))\n"
    response = calls.push(
        client, "alice/early", script, datasets=["alice/fresh-data", "alice/no-such-data"]
    )
    assert response.invalid_dataset_sources == ["alice/fresh-data", "alice/no-such-data"]
    final, _ = calls.wait_for(client, "alice/early", TERMINAL)
    assert final.status == S.COMPLETE
    assert emulator.push_counts == {"alice/early": 1}


def test_each_file_of_a_version_is_kept_at_the_top_level_under_its_uploaded_name(
    emulator: Emulator, client: KaggleClient, tmp_path: Path
) -> None:
    """What Baton's flat checkpoint layout relies on (worker/boundary/version_layout.py): each
    file of the folder is its own upload, kept at the version's top level under the name it was
    uploaded as (paths are not kept: kaggle-cli #890)."""
    names = {f"checkpoint-s00000-step1-abc__shard_2d{index:03d}_2ebin": "x" for index in range(12)}
    folder = _folder(tmp_path / "many", "many-files", names)
    assert not emulator.kaggle_api().dataset_create_new(str(folder), quiet=True).error
    _wait_ready(client, "many-files")
    assert sorted(_file_names(client, "many-files")) == sorted(names)


def test_a_version_of_more_than_1000_files_is_refused_with_kaggles_text(tmp_path: Path) -> None:
    """Up to 1000 files a version; one more is refused with Kaggle's own text (the CLI printed
    "The file count exceeds the maximum of 1000", whirlwide/candlestick_retriever #15). (The
    registry itself: 1001 uploads through the client take a minute.)"""
    content = tmp_path / "x"
    content.write_text("x")
    registry = DatasetRegistry(tmp_path / "datasets", DatasetTiming(0.0, 0.0), True)

    def dataset(slug: str, files: int) -> None:
        blobs = [Blob(str(i), f"f{i:04d}", 1, content, received=1) for i in range(files)]
        record = Dataset(0, "alice", slug, slug, True, None, None, None)
        registry.create(record, blobs, 0.0)

    dataset("most-files", MAX_FILES_PER_VERSION)
    with pytest.raises(TooManyFiles, match="The file count exceeds the maximum of 1000"):
        dataset("too-many-files", MAX_FILES_PER_VERSION + 1)
    assert [d.slug for d in registry.all()] == ["most-files"]
