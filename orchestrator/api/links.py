"""OpenAPI links: how an answer's ids feed the next call (clients and schemathesis follow them)."""

from __future__ import annotations

from typing import Any


def operation_ref(path: str, method: str) -> str:
    """A JSON pointer to an operation of this schema (RFC 6901 escapes)."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method.lower()


def link(path: str, method: str, description: str, **parameters: str) -> dict[str, Any]:
    """A link to `method path`, its parameters taken from the answer (`$response.body#/id`)."""
    definition: dict[str, Any] = {
        "operationRef": operation_ref(path, method),
        "description": description,
    }
    if parameters:
        definition["parameters"] = parameters
    return definition
