"""A 405 names in `Allow` every method the path has, not only the first route's."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/api/v1/credentials/kaggle", "DELETE, GET, PUT"),
        ("PATCH", "/api/v1/jobs", "GET, POST"),
        ("DELETE", "/api/v1/jobs/j123", "GET"),
        ("PUT", "/api/v1/tokens/t123", "DELETE"),
        ("PUT", "/ui/static/htmx.min.js", "GET, HEAD"),
    ],
)
def test_allow_lists_every_method_of_the_path(
    api: TestClient, method: str, path: str, allow: str
) -> None:
    response = api.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert response.json() == {"detail": "Method Not Allowed"}
