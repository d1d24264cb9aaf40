"""The CLI starts at once: `import orchestrator.cli` and `baton --help` load nothing of the
server side (the API, the database, the engine, Kaggle, Celery, uvicorn), and `--version` says
which Baton this is. How fast it is, is measured by benchmarks/cli_latency.py, not here."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

from orchestrator.cli import main

SERVER_SIDE = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "kagglesdk",
    "kaggle",
    "uvicorn",
    "celery",
    "redis",
    "orchestrator.api",
    "orchestrator.engine",
    "orchestrator.db",
    "orchestrator.models",
    "orchestrator.backends",
    "orchestrator.service",
)
# What `--help` can do without as well: the HTTP client, the wire models and their pydantic.
CLIENT_SIDE = ("http.client", "urllib3", "httpx", "pydantic", "orchestrator.wire", "yaml")


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def _among(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(f"{n}.") for n in names))


def test_importing_the_cli_loads_no_server_side_module() -> None:
    assert _among(_loaded_after("import orchestrator.cli"), SERVER_SIDE + CLIENT_SIDE) == []


def test_help_loads_neither_the_server_side_nor_the_http_client() -> None:
    code = "from orchestrator.cli import main\nassert main(['--help']) == 0"
    assert _among(_loaded_after(code), SERVER_SIDE + CLIENT_SIDE) == []


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"baton {version('baton')}\n"
