"""422 answers that name the field, quote at most a short excerpt of the input, and stay small.

FastAPI's default 422 repeats every rejected value in full: a 50 MB body came back as 250 MB,
a NaN could not be encoded at all (500), and under the credentials routes the value is a key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

MAX_ERRORS = 5
MAX_BODY_BYTES = 4096
_LOC_PART_CHARS = 40
_LOC_DEPTH = 6
_MSG_CHARS = 200
_INPUT_CHARS = 40
# Routes whose input is a secret: their 422 names the field and never quotes the value.
SECRET_INPUT_PREFIXES = ("/api/v1/credentials", "/api/v1/tokens")


def _clip(text: str, limit: int) -> str:
    # A lone surrogate cannot be encoded as UTF-8: replace it rather than fail the answer.
    safe = text.encode("utf-8", "replace").decode("utf-8")
    return safe if len(safe) <= limit else safe[: limit - 1] + "…"


def _excerpt(value: Any) -> Any:
    """Scalars as they are (non-finite floats as text), strings clipped, containers left out."""
    if value is None or isinstance(value, bool | int):
        return value if not isinstance(value, int) or abs(value) < 10**15 else str(value)[:20]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str | bytes):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return _clip(text, _INPUT_CHARS)
    return None


def _loc(loc: Sequence[Any]) -> list[str | int]:
    parts = [part if isinstance(part, int) else _clip(str(part), _LOC_PART_CHARS) for part in loc]
    return parts[:_LOC_DEPTH]


def summarize_errors(errors: Sequence[Any], *, quote_input: bool) -> list[dict[str, Any]]:
    """At most MAX_ERRORS errors, each with its field and message, plus a count of the rest."""
    detail = []
    for error in errors[:MAX_ERRORS]:
        item: dict[str, Any] = {
            "loc": _loc(error.get("loc", ())),
            "msg": _clip(str(error.get("msg", "")), _MSG_CHARS),
            "type": _clip(str(error.get("type", "value_error")), _LOC_PART_CHARS),
        }
        excerpt = _excerpt(error.get("input")) if quote_input else None
        if excerpt is not None:
            item["input"] = excerpt
        detail.append(item)
    while detail and len(json.dumps(detail)) > MAX_BODY_BYTES - 200:
        detail.pop()
    left_out = len(errors) - len(detail)
    if left_out:
        detail.append(
            {"loc": ["body"], "msg": f"and {left_out} more errors", "type": "too_many_errors"}
        )
    return detail


async def validation_error_answer(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # registered for this exception only
    quote = not request.url.path.startswith(SECRET_INPUT_PREFIXES)
    return JSONResponse({"detail": summarize_errors(exc.errors(), quote_input=quote)}, 422)
