"""What Baton has learned about a Kaggle account and its sessions, kept on disk between ticks.

`AccountFindings`: what `baton kaggle check` measured on the user's real account (where datasets
are mounted, whether pinned `owner/slug/N` sources are accepted, whether an attached secret is
readable, the container's boot offset, whether `session_timeout_seconds` is honoured). The
backend uses these instead of guesses; None means "not measured".

`RunningSince`: when Baton first saw each session RUNNING. Kaggle exposes no start time, and a
GPU queue can hold a session for long, so the stale clock starts there, not at the push.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(value, out, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Findings:
    pinned_sources: bool | None = None
    mount_layout: str | None = None  # e.g. "input/<slug>" or "input/datasets/<owner>/<slug>"
    secret_readable: bool | None = None
    boot_offset_seconds: float | None = None
    timeout_honoured: bool | None = None
    large_script_accepted: bool | None = None
    checked_at: float | None = None


class AccountFindings:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_account(cls, kaggle_dir: Path, username: str) -> AccountFindings:
        """Where the findings of `username` live under the Kaggle backend's directory."""
        return cls(kaggle_dir / "accounts" / f"{username}.json")

    def load(self) -> Findings:
        known = {f.name for f in fields(Findings)}
        return Findings(**{k: v for k, v in _read_json(self.path).items() if k in known})

    def update(self, **changes: Any) -> Findings:
        findings = replace(self.load(), **changes)
        _write_json(self.path, asdict(findings))
        return findings


class RunningSince:
    def __init__(self, path: Path) -> None:
        self.path = path

    def first_seen(self, key: str, now: float) -> float:
        """When `key` was first seen running; records `now` the first time."""
        seen = _read_json(self.path)
        if key not in seen:
            seen[key] = now
            _write_json(self.path, seen)
        return float(seen[key])
