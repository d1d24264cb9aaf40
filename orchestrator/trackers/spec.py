"""The `trackers:` part of a job spec: which trackers get the job's metrics, and where."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The module each tracker's writer imports (orchestrator/trackers/writers.py).
LIBRARIES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
# W&B run ids: letters, digits, - and _ (the web app's URLs hold them as they are).
WANDB_RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
WANDB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class WandbSpec(BaseModel):
    """One W&B run per job, resumed (`resume="allow"`) by every sync under one stable id."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(min_length=1, max_length=128, pattern=WANDB_NAME_PATTERN)
    entity: str | None = Field(default=None, max_length=128, pattern=WANDB_NAME_PATTERN)
    # online: the server's WANDB_API_KEY; offline: files for `wandb sync` (no network).
    mode: Literal["online", "offline"] = "online"
    # Default: baton-<job id>.
    run_id: str | None = Field(default=None, pattern=WANDB_RUN_ID_PATTERN)


class MlflowSpec(BaseModel):
    """One MLflow run per job, in `experiment`."""

    model_config = ConfigDict(extra="forbid")

    # An MLflow tracking server (http or https). Left out: the Baton server's own local store
    # (SQLite) under its data dir. A path is refused: a job could write anywhere on the server.
    tracking_uri: str | None = Field(default=None, max_length=512)
    experiment: str = Field(default="baton", min_length=1, max_length=256)

    @field_validator("tracking_uri")
    @classmethod
    def _a_server(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                "must be an http(s) tracking server; leave it out for the Baton server's own "
                "local store"
            )
        return value


class TrackersSpec(BaseModel):
    """`trackers: {tensorboard: true, wandb: {project: p, mode: offline}, mlflow: true}`."""

    model_config = ConfigDict(extra="forbid")

    tensorboard: bool = Field(default=False, strict=True)
    wandb: WandbSpec | None = None
    mlflow: MlflowSpec | None = None

    @field_validator("mlflow", mode="before")
    @classmethod
    def _true_is_defaults(cls, value: Any) -> Any:
        if value is True:
            return {}
        return None if value is False else value

    @property
    def names(self) -> list[str]:
        """The trackers this spec turns on."""
        chosen = {"tensorboard": self.tensorboard, "wandb": self.wandb, "mlflow": self.mlflow}
        return [name for name, on in chosen.items() if on]


def missing_libraries(trackers: dict[str, Any] | None) -> list[str]:
    """The trackers a stored spec asks for whose library this server lacks."""
    if not trackers:
        return []
    chosen = TrackersSpec.model_validate(trackers).names
    return [name for name in chosen if importlib.util.find_spec(LIBRARIES[name]) is None]
