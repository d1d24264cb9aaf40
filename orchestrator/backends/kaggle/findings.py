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


def write_json_state(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(value, out, sort_keys=True)
    os.replace(tmp, path)


def read_json_state(path: Path) -> dict[str, Any]:
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
        return Findings(**{k: v for k, v in read_json_state(self.path).items() if k in known})

    def update(self, **changes: Any) -> Findings:
        findings = replace(self.load(), **changes)
        write_json_state(self.path, asdict(findings))
        return findings


class RunningSince:
    def __init__(self, path: Path) -> None:
        self.path = path

    def first_seen(self, key: str, now: float) -> float:
        """When `key` was first seen running; records `now` the first time."""
        seen = read_json_state(self.path)
        if key not in seen:
            seen[key] = now
            write_json_state(self.path, seen)
        return float(seen[key])


# GetKernel answering 500 this many times in a row for a slug whose only pushes were refused means
# the slug is an empty "shell" (issue 17): nothing can run under it.
SHELL_AFTER_ERRORS = 2


@dataclass(frozen=True)
class KernelState:
    slug: str
    accepted: bool = False  # a push to `slug` started a session
    refused: bool = False  # a push to `slug` was refused before any was accepted
    get_errors: int = 0  # GetKernel's consecutive 500s for `slug` since
    shells: tuple[str, ...] = ()  # earlier slugs of the job that Kaggle left as shells


class JobKernelRecord:
    """Which kernel slug the job pushes to, kept in the job's Kaggle folder.

    After a refused first push Kaggle may leave an empty kernel "shell": later pushes to that
    slug answer `Notebook not found` and GetKernel answers 500 (field logs, issue 17). The job
    then goes on under a fresh slug, `baton-<job>-r<N>`, recorded here; no session ever ran under
    the shell, so a segment still has one live kernel at most.
    """

    def __init__(self, path: Path, first_slug: str) -> None:
        self.path = path
        self.first_slug = first_slug

    def load(self) -> KernelState:
        value = read_json_state(self.path)
        if not value.get("slug"):
            return KernelState(self.first_slug)
        known = {f.name for f in fields(KernelState)}
        state = {k: v for k, v in value.items() if k in known}
        state["shells"] = tuple(state.get("shells", ()))
        return KernelState(**state)

    def _save(self, state: KernelState) -> KernelState:
        write_json_state(self.path, asdict(state))
        return state

    def pushed(self, accepted: bool) -> None:
        state = self.load()
        if accepted and not state.accepted:
            self._save(replace(state, accepted=True, get_errors=0))
        elif not accepted and not state.accepted and not state.refused:
            self._save(replace(state, refused=True))

    def get_failed(self) -> bool:
        """GetKernel answered 500 for the slug once more; True once it is taken for a shell."""
        state = self.load()
        if state.accepted or not state.refused:
            return False
        state = self._save(replace(state, get_errors=state.get_errors + 1))
        return state.get_errors >= SHELL_AFTER_ERRORS

    def get_answered(self) -> None:
        state = self.load()
        if state.get_errors:
            self._save(replace(state, get_errors=0))

    def abandon_shell(self) -> str:
        """The current slug is a shell: move to a fresh one; returns it."""
        state = self.load()
        shells = (*state.shells, state.slug)
        fresh = f"{self.first_slug}-r{len(shells) + 1}"
        self._save(KernelState(fresh, shells=shells))
        return fresh


class KeptCheckpoints:
    """The job's checkpoint datasets still on Kaggle, oldest first."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[str]:
        value = read_json_state(self.path).get("slugs", [])
        return [str(slug) for slug in value] if isinstance(value, list) else []

    def save(self, slugs: list[str]) -> list[str]:
        write_json_state(self.path, {"slugs": slugs})
        return slugs


# A job's claim on a wheel set lapses this long after its last launch that used it: a job
# paused, failed or deleted since stops holding the set (if it comes back, its next session
# builds the set again, what every session paid before wheel sets).
WHEEL_SET_CLAIM_SECONDS = 7 * 24 * 3600.0


class WheelSetUsers:
    """Which jobs of an account use each of its wheel sets: one empty file per (set, job) under
    the account's folder, touched at every launch that mounts or builds the set (a file each, so
    jobs claiming and releasing at once never lose each other's claims)."""

    def __init__(self, kaggle_dir: Path, username: str) -> None:
        self.root = kaggle_dir / "accounts" / f"{username}.wheel-sets"

    def claim(self, slug: str, job_id: str) -> None:
        (self.root / slug).mkdir(parents=True, exist_ok=True)
        (self.root / slug / job_id).touch()

    def claimed_by(self, job_id: str) -> list[str]:
        """The wheel sets `job_id` claimed."""
        return sorted(path.parent.name for path in self.root.glob(f"*/{job_id}"))

    def release(self, slug: str, job_id: str, now: float) -> bool:
        """Drop `job_id`'s claim; whether no other job's claim on the set is still live (the
        set may then be deleted)."""
        (self.root / slug / job_id).unlink(missing_ok=True)
        live = [
            path
            for path in (self.root / slug).glob("*")
            if now - path.stat().st_mtime < WHEEL_SET_CLAIM_SECONDS
        ]
        return not live
