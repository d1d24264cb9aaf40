"""A job's kernel through the official client, against the emulator: each push is a version whose
status and output are read by its own label, the launch id is read back before a push is
repeated, and every refusal reaches the engine already classified (wait, push elsewhere, or the
user's to fix, with the reason they read)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.first_contact import PHONE_REFUSAL
from tests.support.kaggle import account_on
from tests.support.marks import starts_processes
from worker.boundary.errors import AccountRefused
from worker.kaggle_access.kernel_script import LAUNCH_ID_MARK
from worker.kaggle_access.kernels import (
    JobKernel,
    KernelPush,
    KernelShell,
    KernelStatus,
    PushedVersion,
)

CPU = KernelPush(None, 60, False, True, [], [], [], None)
T4 = KernelPush("NvidiaTeslaT4", 60, False, True, [], [], [], None)
PARTS = 105  # more than one page of the output listing (100)
HANG_GUARD = 60.0


def _script(launch_id: str, body: str) -> str:
    return f"{LAUNCH_ID_MARK}{launch_id}\n{body}"


WRITE = """
import os
os.makedirs("ckpt", exist_ok=True)
for i in range({parts}):
    with open(f"part-{{i:03d}}.txt", "w") as f:
        f.write("x" * i)
with open("ckpt/model.bin", "wb") as f:
    f.write(b"w" * 1000)
os.makedirs("ckpt/optimizer/state", exist_ok=True)
with open("ckpt/optimizer/state/0.bin", "wb") as f:
    f.write(b"o" * 10)
print("trained {tag}")
"""


@pytest.fixture(scope="module")
@starts_processes
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    options = FAST_EMULATOR | {
        "phone_verified": False,
        "refused_push_leaves_shell": True,
        "cut_keeps_output": True,
    }
    with start_emulator(tmp_path_factory.mktemp("emulator"), **options) as running:
        yield running
        assert running.internal_errors == []


def _settled(kernel: JobKernel, version: int) -> tuple[KernelStatus, str]:
    hang_guard = time.monotonic() + HANG_GUARD
    while True:
        status = kernel.status(version)
        if status[0] not in (KernelStatus.QUEUED, KernelStatus.RUNNING):
            return status
        assert time.monotonic() < hang_guard, f"version {version} still {status[0]}"
        time.sleep(0.1)


def test_each_version_is_read_by_its_own_label_with_its_whole_output_and_log(
    emulator: Emulator, tmp_path: Path
) -> None:
    kernel = JobKernel(account_on(emulator), "baton-j1")
    assert kernel.current_launch() is None  # nothing pushed yet: nothing to adopt
    assert kernel.url == "https://www.kaggle.com/code/alice/baton-j1"

    first = kernel.push(_script("j1-0000", WRITE.format(parts=PARTS, tag="first")), CPU)
    assert first == PushedVersion(1, ())
    assert kernel.current_launch() == ("j1-0000", 1)
    second = kernel.push(_script("j1-0001", WRITE.format(parts=2, tag="second")), CPU)
    assert second == PushedVersion(2, ())
    assert kernel.current_launch() == ("j1-0001", 2)
    assert _settled(kernel, 1) == (KernelStatus.COMPLETE, "")
    assert _settled(kernel, 2) == (KernelStatus.COMPLETE, "")
    # Without a version (a push whose answer was lost): the latest one's.
    assert kernel.status(None) == (KernelStatus.COMPLETE, "")

    staging = tmp_path / "output" / "v1"  # its parent made too, as the backend's first collect
    fetched = kernel.download_output(staging, 1)
    parts = {f"part-{i:03d}.txt": "x" * i for i in range(PARTS)}
    written = {
        path.relative_to(staging).as_posix(): path.read_bytes()
        for path in staging.rglob("*")
        if path.is_file()
    }
    log = written.pop("baton-j1.log").decode()
    assert written == {name: text.encode() for name, text in parts.items()} | {
        "ckpt/model.bin": b"w" * 1000,
        "ckpt/optimizer/state/0.bin": b"o" * 10,
    }
    assert fetched == sum(len(content) for content in written.values())
    assert "trained first" in log

    seen: list[set[str]] = []

    def skip_parts(names: set[str], name: str) -> bool:
        seen.append(names)
        return name.startswith("part-")

    fetched = kernel.download_output(tmp_path / "again", 1, skip_parts)
    again = tmp_path / "again"
    kept = sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    assert kept == ["baton-j1.log", "ckpt/model.bin", "ckpt/optimizer/state/0.bin"]
    assert fetched == 1010
    assert len(seen) == PARTS + 2
    assert all(
        names == set(parts) | {"ckpt/model.bin", "ckpt/optimizer/state/0.bin"} for names in seen
    )

    # Into a folder that exists already (the preflight's temporary one).
    (tmp_path / "v2").mkdir()
    kernel.download_output(tmp_path / "v2", 2)
    assert "trained second" in (tmp_path / "v2" / "baton-j1.log").read_text()
    assert not (tmp_path / "v2" / "part-002.txt").exists()


def test_a_failed_or_cut_version_reads_as_such_with_kaggles_message(
    emulator: Emulator,
) -> None:
    kernel = JobKernel(account_on(emulator), "baton-j2")
    failing = kernel.push(_script("j2-0000", "raise SystemExit('out of memory')\n"), CPU)
    status, message = _settled(kernel, failing.version or 0)
    assert status is KernelStatus.ERROR
    assert message != ""
    cut = kernel.push(
        _script("j2-0001", "import time\ntime.sleep(600)\n"),
        KernelPush(None, 1, False, True, [], [], [], None),
    )
    cut_status, cut_message = _settled(kernel, cut.version or 0)
    assert cut_status is KernelStatus.CANCELLED, cut_message
    # The earlier version still reads as itself, not as the latest one.
    assert kernel.status(failing.version) == (KernelStatus.ERROR, message)
    # A source without a launch id is no launch of Baton's to adopt.
    kernel.push("print('by hand')\n", CPU)
    assert kernel.current_launch() is None


def test_sources_kaggle_cannot_mount_are_named_with_the_version(emulator: Emulator) -> None:
    kernel = JobKernel(account_on(emulator), "baton-j3")
    push = KernelPush(
        None,
        60,
        False,
        True,
        ["alice/no-such-dataset"],
        ["alice/no-such-kernel"],
        ["alice/no-model/pytorch/default/1"],
        None,
        ["no-such-competition"],
    )
    pushed = kernel.push(_script("j3-0000", "print(1)\n"), push)
    assert pushed.version == 1
    assert pushed.invalid_sources == (
        "alice/no-such-dataset",
        "alice/no-such-kernel",
        "alice/no-model/pytorch/default/1",
        "no-such-competition",
    )


def test_an_account_without_phone_verification_is_told_how_to_fix_it_then_the_slug_is_a_shell(
    emulator: Emulator,
) -> None:
    kernel = JobKernel(account_on(emulator), "baton-j4")
    with pytest.raises(AccountRefused) as refused:
        kernel.push(_script("j4-0000", "print(1)\n"), T4)
    assert str(refused.value) == (
        f"Kaggle refused the push: {PHONE_REFUSAL} An account without phone verification cannot "
        "run GPU, TPU or internet-enabled kernels: verify your phone at "
        "https://www.kaggle.com/settings, then resume the job"
    )
    # Internet on needs a verified phone too, even for a CPU session (self-chaining needs it).
    online = KernelPush(None, 60, True, True, [], [], [], None)
    with pytest.raises(AccountRefused):
        JobKernel(account_on(emulator), "baton-j5").push(_script("j5-0000", "print(1)\n"), online)
    shell = r"^Kaggle left alice/baton-j4 an empty shell: Notebook not found$"
    with pytest.raises(KernelShell, match=shell):
        kernel.push(_script("j4-0000", "print(1)\n"), CPU)
