"""Texts the engine stores for a user to read (a job's reason, a segment's error), clipped to
the one storage limit (worker/boundary/text.py)."""

from __future__ import annotations

from worker.boundary.text import TEXT_LIMIT
from worker.reasons import storable


def clip(text: str | None, limit: int = TEXT_LIMIT) -> str | None:
    if text is None:
        return None
    text = storable(text)
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
