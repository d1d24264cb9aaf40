"""`baton logs JOB -f`: a job's session logs followed from one session into the next, from a
byte offset, through server restarts; each line printed once, the log never read twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from orchestrator.cli.client import BatonClient, Refused
from orchestrator.cli.jobs import FINISHED, reconnecting

# The server's answer headers (orchestrator/api/routes/jobs.py); no server import here.
NEXT_OFFSET_HEADER = "x-log-next-offset"
ENDED_HEADER = "x-log-session-ended"
_ACTIVE_SEGMENTS = frozenset({"launching", "running", "cancelling"})


@dataclass(frozen=True)
class Chunk:
    text: str
    next_offset: int
    ended: bool  # the session is over and this answer reached the end of its log


@dataclass(frozen=True)
class Position:
    segment: int
    offset: int


def read_chunk(client: BatonClient, job_id: str, at: Position) -> Chunk | None:
    """The whole lines after `at`, or None while the session has no log to read yet."""
    try:
        answer = client.request(
            "GET",
            f"/api/v1/jobs/{job_id}/segments/{at.segment}/log",
            params={"offset": at.offset},
        )
    except Refused as exc:
        if exc.status == 404:
            return None
        raise
    text = answer.data.decode(errors="replace")
    next_offset = int(answer.headers.get(NEXT_OFFSET_HEADER, at.offset))
    ended = answer.headers.get(ENDED_HEADER) == "true"
    return Chunk(text, next_offset, ended and not text)


def follow_job_log(
    client: BatonClient,
    job_id: str,
    start: Position,
    *,
    write: Callable[[str], None],
    say: Callable[[str], None],
    interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Position:
    """Print the job's logs from `start` until the job has finished and its last session's log
    is read to the end; returns where it stopped. `say` tells the user about sessions and
    reconnections (stderr), `write` gets the log's own text (stdout)."""
    from orchestrator.wire import JobOut, SegmentOut

    at = start
    while True:
        chunk = reconnecting(partial(read_chunk, client, job_id, at), say, sleep)
        if chunk is not None and chunk.text:
            write(chunk.text)
            at = Position(at.segment, chunk.next_offset)
            continue
        job, segments = reconnecting(
            lambda: (
                client.call("GET", f"/api/v1/jobs/{job_id}", JobOut),
                client.call("GET", f"/api/v1/jobs/{job_id}/segments", list[SegmentOut]),
            ),
            say,
            sleep,
        )
        current = next((s for s in segments if s.index == at.segment), None)
        over = current is None or current.state not in _ACTIVE_SEGMENTS
        read_out = chunk is None or chunk.ended
        if over and read_out:
            later = [s for s in segments if s.index > at.segment]
            if later:
                following = later[0]
                say(f"── session {following.index} (from step {following.start_step}) ──")
                at = Position(following.index, 0)
                continue
            if job.state in FINISHED:
                return at
        sleep(interval)
