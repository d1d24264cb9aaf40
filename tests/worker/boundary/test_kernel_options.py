"""A Kaggle kernel's options cross into the kernel as JSON and read back whole, self-chaining
included; a misspelt option fails where it is read instead of being silently ignored."""

from __future__ import annotations

import json

import pytest

from worker.boundary.kernel_options import KernelOptions, SelfChain


def _through_the_kernel_source(options: KernelOptions) -> KernelOptions:
    return KernelOptions.from_json(json.loads(json.dumps(options.to_json(), sort_keys=True)))


def test_the_options_read_back_as_they_were_built() -> None:
    first = KernelOptions("baton-j1-ckpt", ["tqdm==4.66.0"], promised_gpus=2)
    assert _through_the_kernel_source(first) == first
    resumed = KernelOptions(
        "baton-j1-ckpt",
        promised_tpu=True,
        checkpoint_file="checkpoint-s3.tar",
        checkpoint_mount="input/datasets/alice/baton-j1-ckpt",
        boot_offset_seconds=12.5,
        chain=SelfChain(
            "alice",
            "baton-j1",
            {"timeout_seconds": 600, "dataset_sources": []},
            pinned_sources=False,
            uses_quota=True,
            tpu=True,
            quota_reserve_seconds=1800.0,
            min_session_seconds=60.0,
        ),
    )
    assert _through_the_kernel_source(resumed) == resumed


def test_a_misspelt_option_is_refused() -> None:
    with pytest.raises(TypeError):
        KernelOptions.from_json({"checkpoint_dataset": "d", "self_chian": True})
