"""Tests that start something heavy are marked `slow` by the fixtures they use, not by hand.

A fixture that starts a training session, a server (the Kaggle emulator, uvicorn, Redis), a
browser or a cluster is decorated with `@starts_processes` under its `@pytest.fixture`; the hook
in tests/conftest.py marks every test that uses it, directly or through another fixture, `slow`.
`make test-fast` (`-m "not slow"`) leaves those out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])
_STARTS_PROCESSES = "_baton_starts_processes"


def starts_processes(fixture_function: F) -> F:
    """Mark a fixture function as one that starts a session, server, browser or cluster."""
    setattr(fixture_function, _STARTS_PROCESSES, True)
    return fixture_function


def uses_process_fixture(item: pytest.Item) -> bool:
    """Whether `item` uses, directly or through other fixtures, one marked `starts_processes`."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a Python test function (a doctest, say)
        return False
    return any(
        getattr(definition.func, _STARTS_PROCESSES, False)
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )
