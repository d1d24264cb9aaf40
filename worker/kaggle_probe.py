"""Runs inside the `baton kaggle check` kernel: what this Kaggle session looks like from inside.

Writes working/preflight.json: where the probe dataset is mounted, whether the attached secret is
readable (never its value), and how long the container ran before Python started. Standard
library plus the worker, like every kernel-side module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.boundary.paths import SessionPaths
from worker.kaggle_access.secrets import read_secret
from worker.kaggle_session import kaggle_root, session_origin
from worker.proctime import process_start_time

REPORT_FILE = "preflight.json"


def find_marker(input_dir: Path, marker: str) -> str | None:
    """The mount folder holding `marker`, relative to input/ (e.g. datasets/alice/probe)."""
    for path in sorted(input_dir.rglob(marker)):
        return path.parent.relative_to(input_dir).as_posix()
    return None


def secret_readable(label: str) -> bool:
    return read_secret(label) is not None


def probe(options: dict[str, Any]) -> dict[str, Any]:
    paths = SessionPaths(kaggle_root())
    report = {
        "mount": find_marker(paths.input, options["marker"]),
        "secret_readable": secret_readable(options["secret_label"]),
        "boot_offset_seconds": round(process_start_time() - session_origin(), 3),
    }
    (paths.working / REPORT_FILE).write_text(json.dumps(report, sort_keys=True))
    return report
