"""Schemathesis drives every operation of the OpenAPI schema: no 5xx, no response off-schema."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.api.main import create_app
from orchestrator.service import build_services, prestart
from tests.factories import auth, job_spec, make_settings

CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# The schema is read from the app when this module is imported; the database behind it is
# migrated by the fixture below, before the first call.
_SETTINGS = make_settings(Path(tempfile.mkdtemp(prefix="baton-schema-")) / "data")
_SERVICES = build_services(_SETTINGS, embedded_loop=False)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_SERVICES))


@pytest.fixture(scope="module", autouse=True)
def seeded_job() -> Iterator[str]:
    """A real job, so that job routes answer with data and conflicts, not only 404."""
    prestart(_SETTINGS)
    with TestClient(create_app(_SERVICES)) as client:
        job_id: str = client.post("/api/v1/jobs", json=job_spec(), headers=auth()).json()["id"]
    yield job_id
    _SERVICES.db.dispose()
    shutil.rmtree(_SETTINGS.data_dir.parent, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=40, deadline=None)
def test_api_conforms_to_its_schema(case: schemathesis.Case, seeded_job: str) -> None:
    case.call_and_validate(headers=auth(), checks=CHECKS)
    if "job_id" in (case.path_parameters or {}):
        case.path_parameters = {**case.path_parameters, "job_id": seeded_job}
        case.call_and_validate(headers=auth(), checks=CHECKS)


@schema.parametrize()
@settings(max_examples=10, deadline=None)
def test_unauthenticated_calls_get_401(case: schemathesis.Case) -> None:
    response = case.call_and_validate(checks=CHECKS)
    # Negative cases include methods the route does not have (405 before any auth).
    if not case.path.startswith("/api/") or case.method.upper() != case.operation.method.upper():
        return
    # FastAPI reads the body before any dependency runs: a body that cannot be read as JSON at
    # all is refused (400, 422) before the token is looked at. Nothing else may answer here.
    if response.status_code == 400:
        assert response.json() == {"detail": "There was an error parsing the body"}
        return
    if response.status_code == 422:
        assert {error["type"] for error in response.json()["detail"]} == {"json_invalid"}
        return
    assert response.status_code == 401, (case.method, case.path, response.text)
    assert response.headers.get("www-authenticate") == ["Bearer"]
