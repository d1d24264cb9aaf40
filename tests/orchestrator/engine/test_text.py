"""What the engine stores for a user to read is clipped to the one storage limit, and a text that
fits is stored exactly as given."""

from __future__ import annotations

from orchestrator.engine.text import clip
from worker.boundary.text import TEXT_LIMIT


def test_a_text_that_fits_the_limit_is_stored_whole_and_a_longer_one_ends_in_an_ellipsis() -> None:
    exactly = "x" * (TEXT_LIMIT - 1) + "y"
    assert clip(exactly) == exactly
    assert clip(exactly + "z") == "x" * (TEXT_LIMIT - 1) + "…"
    assert clip("abcdef", limit=4) == "abc…"
    assert clip(None) is None


def test_a_text_the_database_cannot_store_is_made_storable_before_it_is_measured() -> None:
    assert clip("a\x00b") == "a\ufffdb"
    assert clip("\x00" * 5, limit=4) == "\ufffd" * 3 + "…"
