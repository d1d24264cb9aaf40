"""Opaque page tokens over a sorted list, as the list endpoints return them."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TypeVar

from tests.kaggle_emulator.errors import bad_request

T = TypeVar("T")


def _encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _decode(token: str) -> int:
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
        label, _, number = text.partition(":")
        if label != "offset":
            raise ValueError(text)
        return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad_request("Invalid page token") from None


def page(
    items: Sequence[T], page_size: int | None, token: str | None, default_size: int
) -> tuple[list[T], str | None]:
    """One page of `items` and the token of the next page (None on the last page)."""
    size = page_size if page_size and page_size > 0 else default_size
    offset = _decode(token) if token else 0
    end = offset + size
    return list(items[offset:end]), (_encode(end) if end < len(items) else None)
