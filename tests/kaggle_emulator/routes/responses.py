"""What a route returns: a JSON message, or a redirect for the HttpRedirect methods."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.kaggle_emulator.state import CallContext, EmulatorState


@dataclass(frozen=True)
class Redirect:
    url: str


Reply = dict[str, Any] | Redirect
Handler = Callable[[EmulatorState, CallContext, dict[str, Any]], Reply]
