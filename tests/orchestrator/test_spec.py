"""The job spec's own rules (orchestrator/spec.py), without the API: what a submit refuses, at
which field, and what it fills in. The API turns each refusal into a 422 naming the same field
(tests/orchestrator/api/test_hostile_input.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.spec import (
    MAX_CONFIG_BYTES,
    Accelerator,
    JobSpec,
    KaggleSpec,
    check_json_values,
    load_spec_file,
    spec_warnings,
    stored_spec,
)
from tests.factories import job_spec

HOUR = 3600


def refused(data: dict[str, Any]) -> Any:
    """The one error a spec is refused with: a `value_error`, as pydantic types its own, so a
    client reads every 422 of a submit alike."""
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    assert errors[0]["type"] == "value_error"
    return errors[0]


def refusal(data: dict[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """The location and message of the one error a spec is refused with."""
    error = refused(data)
    return error["loc"], error["msg"]


def kaggle_job(kaggle: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    return job_spec(backend="kaggle", kaggle=kaggle, **overrides)


def test_a_kaggle_job_without_kaggle_options_gets_the_defaults() -> None:
    spec = JobSpec.model_validate(kaggle_job())
    assert spec.kaggle == KaggleSpec()
    assert spec.kaggle.accelerator is Accelerator.T4X2
    assert (spec.kaggle.is_private, spec.kaggle.enable_internet) == (True, False)
    assert spec.kaggle.quota_reserve_seconds == 1800


def test_a_local_job_keeps_no_kaggle_options_and_refuses_them() -> None:
    assert JobSpec.model_validate(job_spec()).kaggle is None
    loc, msg = refusal(job_spec(kaggle={"accelerator": "tpu"}))
    assert loc == ("kaggle",)
    assert "kaggle options need backend: kaggle" in msg


@pytest.mark.parametrize(
    ("accelerator", "hours", "shape", "gpu"),
    [
        ("tpu", 9, "TpuV5E8", False),
        ("t4x2", 12, "NvidiaTeslaT4", True),
        ("p100", 12, "NvidiaTeslaT4", True),
        ("none", 12, None, False),
    ],
)
def test_each_accelerator_runs_on_its_machine_for_at_most_kaggle_s_session(
    accelerator: str, hours: int, shape: str | None, gpu: bool
) -> None:
    def with_limit(seconds: float) -> dict[str, Any]:
        data = kaggle_job({"accelerator": accelerator})
        data["session"]["limit_seconds"] = seconds
        return data

    kaggle = JobSpec.model_validate(with_limit(hours * HOUR)).kaggle
    assert kaggle is not None
    assert (kaggle.machine_shape, kaggle.uses_gpu) == (shape, gpu)
    assert kaggle.max_session_seconds == hours * HOUR
    error = refused(with_limit(hours * HOUR + 1))
    assert error["loc"] == ("session", "limit_seconds")
    assert f"Kaggle ends {accelerator} sessions after {hours * HOUR} s" in error["msg"]
    assert error["input"] == hours * HOUR + 1  # the 422 shows the limit it refused


@pytest.mark.parametrize("needs", ["requirements", "self_chain"])
def test_what_needs_the_internet_is_refused_without_it_and_kept_with_it(needs: str) -> None:
    value: Any = ["numpy==2.1.0"] if needs == "requirements" else True
    error = refused(kaggle_job({needs: value}))
    assert error["loc"] == ("kaggle", needs)
    assert f"{needs} requires enable_internet: true" in error["msg"]
    assert error["input"] == value
    spec = JobSpec.model_validate(kaggle_job({needs: value, "enable_internet": True}))
    assert getattr(spec.kaggle, needs) == value


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("dataset_sources", ["me/data", "me/data-v2.1/3"], "me/data/v3"),
        ("kernel_sources", ["me/kernel_1"], "me"),
        ("model_sources", ["me/llama/pytorch/7b", "me/llama/pytorch/7b/2"], "me/llama/pytorch"),
        ("competition_sources", ["titanic"], "me/titanic"),
        ("requirements", ["numpy>=2,<3", "torch[cpu]==2.5.1"], "numpy; rm -rf /"),
    ],
)
def test_sources_and_requirements_take_only_their_own_form(
    field: str, good: list[str], bad: str
) -> None:
    options: dict[str, Any] = {"enable_internet": True}
    spec = JobSpec.model_validate(kaggle_job({**options, field: good}))
    assert getattr(spec.kaggle, field) == good
    # A bad entry is named, wherever it stands in the list.
    loc, msg = refusal(kaggle_job({**options, field: [*good, bad]}))
    assert loc == ("kaggle", field)
    assert repr(bad) in msg


def test_a_requirement_longer_than_200_characters_is_refused() -> None:
    options = {"enable_internet": True}
    JobSpec.model_validate(kaggle_job({**options, "requirements": ["a" * 200]}))
    loc, _ = refusal(kaggle_job({**options, "requirements": ["a" * 201]}))
    assert loc == ("kaggle", "requirements")


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ({"lr": float("nan")}, "config.lr holds nan"),
        ({"layers": [1, float("inf")]}, "config.layers[1] holds inf"),
        ({"name": "a\x00b"}, "config.name contains a NUL character"),
        ({"a\x00": 1}, "config key contains a NUL character"),
        ({"text": "\ud800"}, "config.text contains a lone surrogate"),
    ],
)
def test_config_refuses_what_json_or_the_database_would_change_naming_where(
    config: dict[str, Any], where: str
) -> None:
    loc, msg = refusal(job_spec(config=config))
    assert loc == ("config",)
    assert where in msg


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def nested_lists(depth: int) -> dict[str, Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return {"k": value}


@pytest.mark.parametrize("make", [nested, nested_lists], ids=["dicts", "lists"])
def test_config_nesting_stops_at_32_levels(make: Any) -> None:
    JobSpec.model_validate(job_spec(config=make(32)))  # the innermost value is level 32
    loc, msg = refusal(job_spec(config=make(33)))
    assert loc == ("config",)
    assert "nested more than 32 levels deep" in msg


def test_a_long_key_is_named_by_its_first_40_characters() -> None:
    _, msg = refusal(job_spec(config={"k" * 100: float("nan")}))
    assert f"config.{'k' * 40} holds nan" in msg
    assert "k" * 41 not in msg


def test_a_config_over_the_size_limit_is_refused_with_its_size() -> None:
    filler = MAX_CONFIG_BYTES - len('{"x": ""}')
    JobSpec.model_validate(job_spec(config={"x": "a" * filler}))
    loc, msg = refusal(job_spec(config={"x": "a" * (filler + 1)}))
    assert loc == ("config",)
    assert f"config is {MAX_CONFIG_BYTES + 1} bytes; the limit is {MAX_CONFIG_BYTES}" in msg


def test_nested_values_are_checked_in_lists_and_dicts() -> None:
    check_json_values({"a": [{"b": 1.5, "c": ["ok"]}]}, "config")
    with pytest.raises(ValueError, match=r"config\.a\[0\]\.b holds nan"):
        check_json_values({"a": [{"b": float("nan")}]}, "config")
    with pytest.raises(ValueError, match=r"config\.a\[1\] contains a NUL"):
        check_json_values({"a": ["x", "\x00"]}, "config")


LM = "trainers.hf_lm:HFCausalLM"


def test_a_kaggle_gpu_lm_job_that_does_not_fit_a_t4_is_refused_at_config() -> None:
    huge = {"hidden_size": 65536, "num_hidden_layers": 512, "vocab_size": 256000}
    loc, msg = refusal(kaggle_job(trainer=LM, config=huge))
    assert loc == ("config",)
    assert msg  # the planner's advice, in words
    # The same config on a CPU session is not the GPU memory planner's to judge; only the
    # checkpoint's size against the session's disk still bounds it.
    _, on_cpu = refusal(kaggle_job({"accelerator": "none"}, trainer=LM, config=huge))
    assert "/kaggle/working" in on_cpu
    # Nor is another trainer's config.
    JobSpec.model_validate(kaggle_job(config=huge))


def test_a_kaggle_gpu_lm_config_of_the_wrong_type_is_refused_at_config_not_a_crash() -> None:
    loc, msg = refusal(kaggle_job(trainer=LM, config={"hidden_size": "wide"}))
    assert loc == ("config",)
    assert msg.startswith("config does not describe a model the memory planner can size: ")


def test_p100_jobs_are_warned_that_they_run_on_t4x2() -> None:
    assert spec_warnings(kaggle_job({"accelerator": "p100"})) == [
        "P100 was retired on 2026-09-15: Kaggle runs P100 requests on T4 x2, so this job "
        "is pushed as t4x2 (NvidiaTeslaT4)."
    ]
    assert spec_warnings(kaggle_job({"accelerator": "t4x2"})) == []
    assert spec_warnings(kaggle_job()) == []
    assert spec_warnings(job_spec()) == []


def test_a_spec_file_is_yaml_or_json_and_must_be_a_mapping(tmp_path: Path) -> None:
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text("name: j\nbackend: local\nsession:\n  limit_seconds: 60\n")
    assert load_spec_file(yaml_file) == {
        "name": "j",
        "backend": "local",
        "session": {"limit_seconds": 60},
    }
    json_file = tmp_path / "job.json"
    json_file.write_text('{"name": "j"}')
    assert load_spec_file(json_file) == {"name": "j"}
    listing = tmp_path / "list.yaml"
    listing.write_text("- name: j\n")
    with pytest.raises(ValueError, match="a spec must be a mapping"):
        load_spec_file(listing)


def test_a_stored_spec_reads_back_as_submitted() -> None:
    data = kaggle_job({"accelerator": "tpu"})
    data["session"]["limit_seconds"] = 9 * HOUR
    assert stored_spec(data) == JobSpec.model_validate(data)
