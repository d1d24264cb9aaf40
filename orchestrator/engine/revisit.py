"""What each phase of the engine tells it to do next: when the job needs a look again."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Next:
    """When the job needs a look again: `delay` seconds (None: at once); `again`: within this
    same visit, because something ended and the next step can start now."""

    delay: float | None
    again: bool = False
