"""Checkpoint downloads open the file once: a prune between the check and the body gives the
whole file (or 410 if it came first), never a 500 or a body cut short."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from orchestrator.api.open_file_response import OpenFileResponse, byte_range
from orchestrator.config import Settings
from tests.factories import job_spec, wait_finished

DATA = bytes(range(256)) * 4096  # 1 MiB


def _pruned_mid_answer(tmp_path: Path) -> TestClient:
    """An app whose file is pruned (its directory removed) after opening, before the body."""
    store = tmp_path / "step-10"

    def download(request: Request) -> OpenFileResponse:
        store.mkdir(exist_ok=True)
        (store / "model.pt").write_bytes(DATA)
        opened = open(store / "model.pt", "rb")  # noqa: SIM115 -- the response closes it
        response = OpenFileResponse(opened, "model.pt", request.headers.get("range"))
        shutil.rmtree(store)  # the prune
        return response

    return TestClient(Starlette(routes=[Route("/f", download)]))


def test_a_prune_after_opening_still_gives_the_whole_body(tmp_path: Path) -> None:
    with _pruned_mid_answer(tmp_path) as client:
        whole = client.get("/f")
        part = client.get("/f", headers={"Range": "bytes=1000-1999"})
        tail = client.get("/f", headers={"Range": "bytes=-10"})
        past = client.get("/f", headers={"Range": f"bytes={len(DATA)}-"})
    assert whole.status_code == 200
    assert int(whole.headers["content-length"]) == len(DATA)
    assert hashlib.sha256(whole.content).digest() == hashlib.sha256(DATA).digest()
    assert whole.headers["content-disposition"] == 'attachment; filename="model.pt"'
    assert (part.status_code, part.content) == (206, DATA[1000:2000])
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(DATA)}"
    assert (tail.status_code, tail.content) == (206, DATA[-10:])
    assert past.status_code == 416
    assert past.headers["content-range"] == f"bytes */{len(DATA)}"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=5-", (5, 99)),
        ("bytes=-5", (95, 99)),
        ("bytes=90-500", (90, 99)),
        ("bytes=9-3", None),
        ("bytes=1-2,4-5", None),  # several ranges: the whole file
        ("items=1-2", None),
    ],
)
def test_byte_ranges(header: str | None, expected: tuple[int, int] | None) -> None:
    assert byte_range(header, 100) == expected


def test_a_checkpoint_pruned_before_the_request_is_410(
    live_api: TestClient, settings: Settings
) -> None:
    job_id = live_api.post("/api/v1/jobs", json=job_spec(total_steps=5)).json()["id"]
    assert wait_finished(live_api, job_id)["state"] == "succeeded"
    checkpoint = live_api.get(f"/api/v1/jobs/{job_id}/checkpoints").json()[-1]
    name = next(iter(checkpoint["manifest"]["files"]))
    url = f"/api/v1/jobs/{job_id}/checkpoints/{checkpoint['step']}/files/{name}"
    assert live_api.get(url).status_code == 200
    for found in settings.checkpoints_dir.rglob(name):
        found.unlink()
    assert live_api.get(url).status_code == 410
