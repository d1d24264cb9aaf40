"""The launch id: one per segment, the backends' idempotency key (`<job id>-<index:04d>`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchId:
    job_id: str
    segment_index: int

    def __str__(self) -> str:
        return f"{self.job_id}-{self.segment_index:04d}"

    @classmethod
    def parse(cls, text: str) -> LaunchId:
        job_id, sep, index = text.rpartition("-")
        if not sep or not job_id or not index.isdigit():
            raise ValueError(f"not a launch id: {text!r}")
        return cls(job_id, int(index))
