"""Why a rank ended, left on disk where rank 0 and the launcher read it.

When one rank of several fails (hung, or an error of its own), the others only see a broken
collective ("Connection closed by peer"). The failing rank writes one line first, so the
segment's error names the rank and its reason instead of the symptom on rank 0. The files'
places are SessionPaths.rank_failure's.
"""

from __future__ import annotations

import time

from worker.boundary.paths import SessionPaths

# Ranks a session can have (spec's MAX_NPROC is 8): the notes looked for.
_MAX_RANKS = 64


def write_rank_note(paths: SessionPaths, rank: int, reason: str) -> None:
    paths.working.mkdir(parents=True, exist_ok=True)
    paths.rank_failure(rank).write_text(reason)


def peer_failure(paths: SessionPaths, rank: int) -> str | None:
    """The first other rank's reason, as "rank N: reason", or None if no other rank left one."""
    for other in range(_MAX_RANKS):
        if other == rank:
            continue
        try:
            reason = paths.rank_failure(other).read_text().strip()
        except OSError:
            continue
        return f"rank {other}: {reason}"
    return None


def await_peer_failure(paths: SessionPaths, rank: int, seconds: float) -> str | None:
    """`peer_failure`, waiting up to `seconds` for one: a rank stuck in a collective behind a
    hung peer notices at about the same moment as the peer, and the peer's reason is the cause."""
    give_up = time.monotonic() + seconds
    while (found := peer_failure(paths, rank)) is None and time.monotonic() < give_up:
        time.sleep(0.05)
    return found


def clear_rank_notes(paths: SessionPaths) -> None:
    """Notes of an earlier attempt must not explain this one's failure."""
    for rank in range(_MAX_RANKS):
        paths.rank_failure(rank).unlink(missing_ok=True)
