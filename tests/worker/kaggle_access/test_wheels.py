"""The wheel set on Kaggle (worker/kaggle_access/wheels.py): published through the checkpoints'
uploader, seen READY by the one call the orchestrator makes before each push, and mounted by a
self-chaining kernel into its successor's push once READY (worker/kaggle_access/chaining.py)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from tests.factories import wheel_file
from tests.kaggle_emulator import Emulator
from worker.boundary.kernel_options import KernelOptions, SelfChain, WheelSet
from worker.kaggle_access.chaining import mount_wheel_set
from worker.kaggle_access.client import KaggleAccount
from worker.kaggle_access.kernels import KernelPush
from worker.kaggle_access.wheels import WheelSetDataset
from worker.wheelhouse import WHEELSET_FILE

SLUG = "baton-wheels-0123456789abcdef"
REF = f"alice/{SLUG}"


def _chained(push: KernelPush) -> KernelOptions:
    link = SelfChain(username="alice", kernel_slug="baton-j1", push=asdict(push))
    return KernelOptions(
        "baton-ckpt-j1", ["baton-wheel-req"], chain=link, wheels=WheelSet("alice", SLUG)
    )


def _published(alice: KaggleAccount, tmp_path: Path) -> WheelSetDataset:
    folder = tmp_path / "set"
    wheel_file(folder, "baton-wheel-req", "1.0")
    (folder / WHEELSET_FILE).write_text("{}")
    dataset = WheelSetDataset(alice, SLUG)
    dataset.publish(folder)
    for _ in range(100):
        if dataset.ready():
            break
        time.sleep(0.05)
    return dataset


def test_a_published_set_is_ready_and_holds_its_files(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    assert not WheelSetDataset(alice, SLUG).ready()  # none yet: the session builds it
    assert _published(alice, tmp_path).ready()
    record = emulator.dataset(REF)
    assert record is not None
    names = {path for path, _ in record.versions[-1].files()}
    assert {"baton_wheel_req-1.0-py3-none-any.whl", WHEELSET_FILE} <= names


def test_a_self_chaining_kernel_mounts_the_ready_set_into_every_successor(
    emulator: Emulator, alice: KaggleAccount, tmp_path: Path
) -> None:
    push = KernelPush(None, 60, True, True, [], [], [], None)
    options = _chained(push)
    # Not there yet: the successor builds it, as the first session did.
    assert mount_wheel_set(alice, options, push) == (options, push)
    _published(alice, tmp_path)
    mounted, successor = mount_wheel_set(alice, options, push)
    assert successor.dataset_sources == [REF]
    assert mounted.wheels == WheelSet("alice", SLUG, attached=True)
    # ...and the successor passes it on to its own successor's push.
    assert mounted.chain is not None
    assert mounted.chain.push["dataset_sources"] == [REF]
    assert mount_wheel_set(alice, mounted, successor) == (mounted, successor)
