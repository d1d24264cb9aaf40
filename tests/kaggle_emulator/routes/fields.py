"""Typed reads of camelCase request fields; a wrong type is a 400 that names the field."""

from __future__ import annotations

from typing import Any

from tests.kaggle_emulator.errors import bad_request

Body = dict[str, Any]


def text(body: Body, key: str) -> str | None:
    value = body.get(key)
    if value is None or isinstance(value, str):
        return value
    raise bad_request(f"{key} must be a string")


def required_text(body: Body, key: str) -> str:
    value = text(body, key)
    if not value:
        raise bad_request(f"{key} is required")
    return value


def integer(body: Body, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)  # proto3 JSON may send int64 values as strings
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise bad_request(f"{key} must be an integer")


def flag(body: Body, key: str) -> bool | None:
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise bad_request(f"{key} must be a boolean")


def strings(body: Body, key: str) -> list[str]:
    value = body.get(key) or []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise bad_request(f"{key} must be a list of strings")


def objects(body: Body, key: str) -> list[Body]:
    value = body.get(key) or []
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    raise bad_request(f"{key} must be a list of objects")


def obj(body: Body, key: str) -> Body:
    value = body.get(key) or {}
    if isinstance(value, dict):
        return value
    raise bad_request(f"{key} must be an object")
