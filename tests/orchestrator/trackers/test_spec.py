"""The `trackers:` part of a job spec: what it turns on, and each refusal at its field (the API
answers those with a 422 naming the same field)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.spec import JobSpec
from tests.factories import job_spec


def trackers(value: Any) -> JobSpec:
    return JobSpec.model_validate(job_spec(trackers=value))


def refused_at(value: Any) -> tuple[tuple[str | int, ...], str]:
    with pytest.raises(ValidationError) as caught:
        trackers(value)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return errors[0]["loc"], errors[0]["msg"]


def test_each_tracker_is_off_unless_asked_for() -> None:
    assert JobSpec.model_validate(job_spec()).trackers is None
    spec = trackers({"tensorboard": True, "wandb": {"project": "lm"}, "mlflow": True})
    assert spec.trackers is not None
    assert spec.trackers.names == ["tensorboard", "wandb", "mlflow"]
    assert spec.trackers.wandb is not None
    assert (spec.trackers.wandb.mode, spec.trackers.wandb.run_id) == ("online", None)
    assert spec.trackers.mlflow is not None
    assert (spec.trackers.mlflow.tracking_uri, spec.trackers.mlflow.experiment) == (None, "baton")
    assert trackers({"mlflow": False}).trackers.names == []  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "loc"),
    [
        ({"tensorboard": "yes"}, ("trackers", "tensorboard")),
        ({"wandb": {}}, ("trackers", "wandb", "project")),
        ({"wandb": {"project": "lm", "mode": "disabled"}}, ("trackers", "wandb", "mode")),
        ({"wandb": {"project": "lm", "run_id": "a/b"}}, ("trackers", "wandb", "run_id")),
        ({"mlflow": {"tracking_uri": "/etc"}}, ("trackers", "mlflow", "tracking_uri")),
        ({"mlflow": {"tracking_uri": "file:///tmp/x"}}, ("trackers", "mlflow", "tracking_uri")),
        ({"comet": True}, ("trackers", "comet")),
    ],
)
def test_a_malformed_tracker_is_refused_at_its_field(value: Any, loc: tuple[str, ...]) -> None:
    assert refused_at(value)[0] == loc


def test_a_path_as_the_mlflow_store_is_refused_saying_why() -> None:
    _, msg = refused_at({"mlflow": {"tracking_uri": "/home/someone/mlruns"}})
    assert "http(s) tracking server" in msg
