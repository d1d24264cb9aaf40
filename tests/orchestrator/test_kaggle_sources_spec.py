"""Kaggle source fields at submit: models need owner/model/framework/variation[/version]
(kagglesdk's ApiSaveKernelRequest; the CLI requires the parts), competitions are slugs."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.spec import KaggleSpec
from tests.factories import kaggle_spec


def _submit(api: TestClient, **kaggle: Any) -> Any:
    return api.post("/api/v1/jobs", json=kaggle_spec(kaggle))


@pytest.mark.parametrize(
    "source", ["google/gemma/pytorch/2b", "google/gemma/pytorch/2b/3", "a-b/m.x/jax/v1.0/12"]
)
def test_a_four_or_five_part_model_source_is_accepted(source: str) -> None:
    spec = KaggleSpec.model_validate({"model_sources": [source]})
    assert spec.model_sources == [source]


@pytest.mark.parametrize("source", ["google/gemma/1", "google/gemma", "a/b/c/d/e/f"])
def test_a_model_source_in_another_form_gets_422_naming_the_format(
    api: TestClient, source: str
) -> None:
    response = _submit(api, model_sources=[source])
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert "model_sources" in error["loc"]
    assert "owner/model/framework/variation" in error["msg"]


def test_competition_sources_take_slugs(api: TestClient) -> None:
    spec = KaggleSpec.model_validate({"competition_sources": ["titanic"]})
    assert spec.competition_sources == ["titanic"]
    response = _submit(api, competition_sources=["owner/titanic"])
    assert response.status_code == 422
    assert "competition_sources" in response.json()["detail"][0]["loc"]
