"""The emulator as hard as Kaggle (issue 17): real refusal texts, Kaggle's 429 body, dataset
processing that grows with size, internet-off sessions cut off from the API. Each is read
through Baton's own client code, which must still classify it right."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.backends.base import Transient
from orchestrator.backends.kaggle.backend import KaggleBackend, KaggleHandle, kernel_slug
from orchestrator.spec import KaggleSpec
from tests.factories import FAST_EMULATOR, kaggle_spec
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.kernel_sessions import WorkerStatus
from tests.support.kaggle import account_on
from worker.kaggle_access.kernels import JobKernel, KernelPush, PushDeferred

T4 = KernelPush("NvidiaTeslaT4", 60, False, True, [], [], [], None)
SLEEP = "import time\ntime.sleep(30)\n"


def test_kaggles_weekly_quota_text_is_a_deferral(tmp_path: Path) -> None:
    with (
        start_emulator(tmp_path / "e", **FAST_EMULATOR, gpu_allowance_seconds=0) as emulator,
        pytest.raises(PushDeferred, match=r"Maximum weekly GPU quota of 0\.00 hours"),
    ):
        JobKernel(account_on(emulator), "gpu").push(SLEEP, T4)


def test_the_gpu_session_cap_text_is_a_deferral(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "e", **FAST_EMULATOR, max_gpu_sessions=1) as emulator:
        alice = account_on(emulator)
        JobKernel(alice, "gpu-1").push(SLEEP, T4)
        with pytest.raises(PushDeferred, match=r"Maximum batch GPU session count of 1 reached\."):
            JobKernel(alice, "gpu-2").push(SLEEP, T4)


@pytest.mark.parametrize("google_body", [True, False], ids=["kaggle-931", "old"])
def test_a_429_in_either_body_is_transient_with_its_retry_after(
    tmp_path: Path, google_body: bool
) -> None:
    with start_emulator(
        tmp_path / "e",
        **FAST_EMULATOR,
        rate_limit_per_minute=2,
        rate_limit_google_body=google_body,
    ) as emulator:
        kernel = JobKernel(account_on(emulator), "k")
        for _ in range(2):
            kernel.current_launch()
        with pytest.raises(Transient) as raised:
            kernel.current_launch()
    assert raised.value.retry_after is not None
    assert raised.value.retry_after >= 1


def test_dataset_processing_grows_with_size(tmp_path: Path) -> None:
    with start_emulator(
        tmp_path / "e", **FAST_EMULATOR, dataset_bytes_per_second=1000.0
    ) as emulator:
        api = emulator.kaggle_api()
        for name, size in (("small", 100), ("large", 20_000)):
            folder = tmp_path / name
            folder.mkdir()
            (folder / "data.bin").write_bytes(b"x" * size)
            (folder / "dataset-metadata.json").write_text(
                f'{{"id": "alice/{name}-data", "title": "{name}-data", '
                '"licenses": [{"name": "CC0-1.0"}]}'
            )
            api.dataset_create_new(str(folder), public=False, quiet=True)
        spans = {}
        for name in ("small", "large"):
            record = emulator.dataset(f"alice/{name}-data")
            assert record is not None
            (version,) = record.versions
            spans[name] = version.ready_at - version.created_at
    assert spans["large"] - spans["small"] >= 19.0


def _reaches_api(emulator: Emulator, slug: str, internet: bool) -> str:
    script = (
        "import pathlib\n"
        "from kagglesdk import KaggleClient\n"
        "from kagglesdk.kernels.types.kernels_api_service import "
        "ApiGetAcceleratorQuotaStatisticsRequest\n"
        "try:\n"
        "    with KaggleClient(username='alice', password='alice-key') as client:\n"
        "        client.kernels.kernels_api_client.get_accelerator_quota_statistics(\n"
        "            ApiGetAcceleratorQuotaStatisticsRequest())\n"
        "    outcome = 'reached'\n"
        "except Exception as exc:\n"
        "    outcome = 'blocked: ' + type(exc).__name__\n"
        "pathlib.Path('outcome.txt').write_text(outcome)\n"
    )
    kernel = JobKernel(account_on(emulator), slug)
    kernel.push(script, KernelPush(None, 60, internet, True, [], [], [], None))
    deadline = time.monotonic() + 60
    while emulator.sessions(kernel.ref)[-1].status is not WorkerStatus.COMPLETE:
        assert time.monotonic() < deadline, emulator.sessions(kernel.ref)
        time.sleep(0.1)
    root = emulator.sessions(kernel.ref)[-1].root
    return (root / "working" / "outcome.txt").read_text()


def test_an_internet_off_session_cannot_reach_the_api(emulator: Emulator) -> None:
    assert _reaches_api(emulator, "online", internet=True) == "reached"
    assert _reaches_api(emulator, "offline", internet=False).startswith("blocked")


def _finished(emulator: Emulator, ref: str) -> Path:
    deadline = time.monotonic() + 60
    while emulator.sessions(ref)[-1].status is not WorkerStatus.COMPLETE:
        assert time.monotonic() < deadline, emulator.sessions(ref)
        time.sleep(0.1)
    return emulator.sessions(ref)[-1].root


@pytest.mark.parametrize("dropped", [False, True], ids=["honoured", "dropped"])
def test_kernel_outputs_mount_under_notebooks_and_a_pin_may_be_dropped(
    tmp_path: Path, dropped: bool
) -> None:
    cpu = KernelPush(None, 60, False, True, [], [], [], None)
    with start_emulator(
        tmp_path / "e", **FAST_EMULATOR, pinned_kernel_sources_dropped=dropped
    ) as emulator:
        alice = account_on(emulator)
        producer = JobKernel(alice, "producer")
        for version in ("1", "2"):
            producer.push(f"open('out.txt', 'w').write({version!r})\n", cpu)
            _finished(emulator, producer.ref)
        consumer = JobKernel(alice, "consumer")
        read = (
            "import pathlib\n"
            "found = pathlib.Path('../input/notebooks/alice/producer/out.txt').read_text()\n"
            "pathlib.Path('seen.txt').write_text(found)\n"
        )
        consumer.push(read, KernelPush(None, 60, False, True, [], ["alice/producer/1"], [], None))
        root = _finished(emulator, consumer.ref)
    # Kaggle accepted the pin either way; with the drop it mounted the latest version.
    assert (root / "working" / "seen.txt").read_text() == ("2" if dropped else "1")


def test_writing_past_the_working_cap_stops_the_session_with_the_reason(tmp_path: Path) -> None:
    script = "open('big.bin', 'wb').write(b'x' * 5000)\nimport time\ntime.sleep(30)\n"
    with start_emulator(tmp_path / "e", **FAST_EMULATOR, working_bytes_cap=1000) as emulator:
        alice = account_on(emulator)
        kernel = JobKernel(alice, kernel_slug("j1"))
        pushed = kernel.push(script, KernelPush(None, 60, False, True, [], [], [], None))
        deadline = time.monotonic() + 60
        while emulator.sessions(kernel.ref)[-1].active:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        session = emulator.sessions(kernel.ref)[-1]
        assert session.status is WorkerStatus.ERROR
        options = KaggleSpec.model_validate(kaggle_spec()["kaggle"])
        backend = KaggleBackend(alice, "j1", options, tmp_path / "kaggle" / "j1")
        handle = KaggleHandle(kernel.ref, 0, pushed.version, "j1", 60).encode()
        collected = backend.collect(handle, tmp_path / "store" / "00000")
    # The segment's reason names the limit the user hit.
    assert collected.problem is not None
    assert "/kaggle/working" in collected.problem
