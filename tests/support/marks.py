"""Tests that start something heavy are marked `slow` by what they use, not by hand.

A test is `slow` when it, or any fixture it uses (directly or through other fixtures):
- is a fixture decorated `@starts_processes` under its `@pytest.fixture`: one that starts a
  training session, a server (the Kaggle emulator, uvicorn, Redis), a browser or a cluster; or
- uses one of the `starters` the hook in tests/conftest.py passes (start_emulator, run_worker,
  live_server, LocalBackend, the subprocess module...), in its own code or in a function of its
  own module that it calls.
`make test-fast` (`-m "not slow"`) leaves those out.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])
_STARTS_PROCESSES = "_baton_starts_processes"
# How deep calls into a module's own functions are followed.
_MAX_DEPTH = 4


def starts_processes(fixture_function: F) -> F:
    """Mark a fixture function as one that starts a session, server, browser or cluster."""
    setattr(fixture_function, _STARTS_PROCESSES, True)
    return fixture_function


def starts_processes_in(item: pytest.Item, starters: Collection[object]) -> bool:
    """Whether `item` or a fixture it uses is marked `starts_processes` or calls a starter."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for definitions in info.name2fixturedefs.values():
            for definition in definitions:
                if getattr(definition.func, _STARTS_PROCESSES, False):
                    return True
                functions.append(definition.func)
    return any(
        _calls_a_starter(function, starters, set(), 0)
        for function in functions
        if inspect.isfunction(function)
    )


def _calls_a_starter(
    function: types.FunctionType, starters: Collection[object], seen: set[object], depth: int
) -> bool:
    if function in seen or depth > _MAX_DEPTH:
        return False
    seen.add(function)
    namespace = function.__globals__
    for code in _code_objects(function.__code__):
        for name in code.co_names:
            value = namespace.get(name)
            if value is None:
                continue
            if any(_is_or_subclasses(value, starter) for starter in starters):
                return True
            own = inspect.isfunction(value) and value.__module__ == function.__module__
            if own and _calls_a_starter(value, starters, seen, depth + 1):
                return True
    return False


def _is_or_subclasses(value: object, starter: object) -> bool:
    """`value` is the starter, or a class derived from a starter class (a test's own backend)."""
    if value is starter:
        return True
    return isinstance(value, type) and isinstance(starter, type) and issubclass(value, starter)


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    """`code` and the code of every function, lambda or comprehension defined inside it."""
    found = [code]
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found.extend(_code_objects(constant))
    return found
