"""The job spec users submit (JSON over the API, or YAML through the CLI), with its validation."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_CONFIG_BYTES = 64 * 1024
# Below this a session is all start-up: Python plus torch alone take seconds.
MIN_SESSION_SECONDS = 5.0
MAX_SESSION_SECONDS = 7 * 24 * 3600
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
TRAINER_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class MarginSpec(BaseModel):
    """Stop when now + k_steps·ema(step) + save + upload + safety_seconds passes the deadline."""

    model_config = ConfigDict(extra="forbid")

    k_steps: float = Field(default=2.0, ge=0, le=100)
    safety_seconds: float = Field(default=1.0, ge=0, le=3600)


class SessionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit_seconds: float = Field(ge=MIN_SESSION_SECONDS, le=MAX_SESSION_SECONDS)
    margin: MarginSpec = Field(default_factory=MarginSpec)


class RetrySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Consecutive failed segments tolerated; one more fails the job.
    max_failures: int = Field(default=3, ge=0, le=100)


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=NAME_PATTERN)
    backend: Literal["local"]
    trainer: str = Field(max_length=256, pattern=TRAINER_PATTERN)
    config: dict[str, Any] = Field(default_factory=dict)
    total_steps: int = Field(gt=0, le=10**9)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    session: SessionSpec
    retry: RetrySpec = Field(default_factory=RetrySpec)

    @field_validator("trainer")
    @classmethod
    def _trainer_exists(cls, value: str) -> str:
        find_trainer(value)
        return value

    @field_validator("config")
    @classmethod
    def _config_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, default=str))
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"config is {size} bytes; the limit is {MAX_CONFIG_BYTES}")
        return value


def find_trainer(path: str) -> None:
    """Check that "module:Class" names a class or function without importing it.

    Importing would pull in torch, which the orchestrator must not need.
    """
    module_name, _, attr = path.partition(":")
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    if found is None or found.origin is None or not found.origin.endswith(".py"):
        raise ValueError(f"trainer module {module_name!r} was not found")
    tree = ast.parse(Path(found.origin).read_text())
    names = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if attr not in names:
        raise ValueError(f"trainer module {module_name!r} defines no {attr!r}")


def load_spec_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON spec file into a dict (validated later, by the API)."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a spec must be a mapping")
    return data
