"""The job spec users submit (JSON over the API, or YAML through the CLI), with its validation."""

from __future__ import annotations

import enum
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from orchestrator.trackers.spec import TrackersSpec, missing_libraries
from orchestrator.webhooks import NotifySpec
from trainers.memory_plan import check_t4_job, checkpoint_size
from worker.boundary.contract import DEFAULT_K_STEPS, DEFAULT_SAFETY_SECONDS

MAX_CONFIG_BYTES = 64 * 1024
# Below this a session is all start-up: Python plus torch alone take seconds.
MIN_SESSION_SECONDS = 5.0
MAX_SESSION_SECONDS = 7 * 24 * 3600
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# Checked against the allowed trainer packages at submit (orchestrator/trainer_lookup.py).
TRAINER_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"
MAX_NPROC = 8
GB = 10**9
# A Kaggle session's writable /kaggle/working, and a user's private dataset storage
# (docs/kaggle-emulator.md, "Costs").
KAGGLE_WORKING_BYTES = 20 * GB
KAGGLE_PRIVATE_STORAGE_BYTES = 100 * GB
# Trainers whose config the memory planner understands (model sizes, batch, block_size, ...).
BATON_LM_TRAINERS = (
    "trainers.accelerate_lm:",
    "trainers.hf_lm:",
    "trainers.lora_lm:",
    "trainers.deepspeed_lm:",
)


class MarginSpec(BaseModel):
    """Stop when now + k_steps·step + save + upload + safety_seconds passes the deadline.

    step: the larger of the step-time EMA and the slowest of the last 20 steps.
    """

    model_config = ConfigDict(extra="forbid")

    k_steps: float = Field(default=DEFAULT_K_STEPS, ge=0, le=100, strict=True, allow_inf_nan=False)
    safety_seconds: float = Field(
        default=DEFAULT_SAFETY_SECONDS, ge=0, le=3600, strict=True, allow_inf_nan=False
    )


class WatchdogSpec(BaseModel):
    """The session's own health checks (worker/watchdog.py).

    Hung: no step ends within max(hang_floor_seconds, hang_multiple x the learned step time);
    the session dumps its stacks and ends, and the next segment resumes from the last commit
    (hang_floor_seconds 0: off). Diverged: a non-finite loss or grad norm on divergence_steps
    steps in a row (0: off); the job fails naming the last good checkpoint, or with
    on_divergence: rollback resumes from it once with a different data-order seed.
    """

    model_config = ConfigDict(extra="forbid")

    hang_multiple: float = Field(default=10.0, ge=2, le=1000, strict=True, allow_inf_nan=False)
    hang_floor_seconds: float = Field(
        default=600.0, ge=0, le=MAX_SESSION_SECONDS, strict=True, allow_inf_nan=False
    )
    divergence_steps: int = Field(default=3, ge=0, le=10**6, strict=True)
    on_divergence: Literal["fail", "rollback"] = "fail"


class SessionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit_seconds: float = Field(
        ge=MIN_SESSION_SECONDS, le=MAX_SESSION_SECONDS, strict=True, allow_inf_nan=False
    )
    margin: MarginSpec = Field(default_factory=MarginSpec)
    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec)


class RetrySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Consecutive failed segments tolerated; one more fails the job.
    max_failures: int = Field(default=3, ge=0, le=100, strict=True)


def field_error(model: str, loc: tuple[str, ...], message: str, value: Any) -> ValidationError:
    """A validation error located at `loc`, for rules that look at more than one field."""
    error = PydanticCustomError("value_error", message)
    return ValidationError.from_exception_data(
        model, [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class Accelerator(enum.StrEnum):
    NONE = "none"
    T4X2 = "t4x2"
    P100 = "p100"  # retired on 2026-09-15; Kaggle runs such requests on T4 x2
    TPU = "tpu"


# Kaggle's `machine_shape` per accelerator. "NvidiaTeslaT4" is 2 x T4 (no single T4 since
# 2026-09); never rely on `enable_gpu` alone, which gives a P100 (kaggle-cli #821, #1151).
MACHINE_SHAPES: dict[Accelerator, str | None] = {
    Accelerator.NONE: None,
    Accelerator.T4X2: "NvidiaTeslaT4",
    Accelerator.P100: "NvidiaTeslaT4",
    Accelerator.TPU: "TpuV5E8",
}
KAGGLE_SESSION_SECONDS = {Accelerator.TPU: 9 * 3600.0}
KAGGLE_DEFAULT_SESSION_SECONDS = 12 * 3600.0
SOURCE_PATTERN = r"^[A-Za-z0-9][\w-]*/[A-Za-z0-9][\w.-]*(/\d+)?$"
# Kaggle models: owner/model/framework/variation[/version] (kagglesdk ApiSaveKernelRequest; the
# kaggle CLI requires the parts too).
MODEL_SOURCE_PATTERN = r"^[A-Za-z0-9][\w-]*(/[A-Za-z0-9][\w.-]*){3}(/\d+)?$"
COMPETITION_PATTERN = r"^[A-Za-z0-9][\w-]*$"
REQUIREMENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~ ]*$"
DOCKER_IMAGE_PATTERN = r"^[A-Za-z0-9][\w.\-/:@]*$"


class KaggleSpec(BaseModel):
    """How a job's segments run as Kaggle kernels."""

    model_config = ConfigDict(extra="forbid")

    accelerator: Accelerator = Accelerator.T4X2
    enable_internet: bool = Field(default=False, strict=True)
    # pip requirements installed at the start of each session (needs enable_internet).
    requirements: list[str] = Field(default_factory=list, max_length=50)
    # Build the requirements once into a wheel set (a private dataset of the account, shared by
    # jobs with the same requirements and image) and install later sessions offline from it
    # (docs/kaggle.md, "Requirements"); false: every session pip-installs from the index.
    wheel_set: bool = Field(default=True, strict=True)
    dataset_sources: list[str] = Field(default_factory=list, max_length=20)
    kernel_sources: list[str] = Field(default_factory=list, max_length=20)
    model_sources: list[str] = Field(default_factory=list, max_length=20)
    competition_sources: list[str] = Field(default_factory=list, max_length=20)
    docker_image: str | None = Field(default=None, max_length=256, pattern=DOCKER_IMAGE_PATTERN)
    is_private: bool = Field(default=True, strict=True)
    # Checkpoints kept on Kaggle: the newest this many, each its own private dataset; older ones
    # are deleted (private dataset storage is limited, kaggle-api #424). 0, and self-chaining
    # jobs: every checkpoint a version of one dataset, all kept (the client cannot delete one).
    keep_versions: int = Field(default=2, ge=0, le=1000, strict=True)
    # Quota kept back from sizing a segment: the last session of the week stops this much early.
    quota_reserve_seconds: float = Field(
        default=1800.0, ge=0, le=24 * 3600, strict=True, allow_inf_nan=False
    )
    # The segment publishes its checkpoint and pushes its successor itself (needs internet and
    # a Kaggle Secret named BATON_KAGGLE_KEY attached to the kernel).
    self_chain: bool = Field(default=False, strict=True)
    # How often a kernel with internet reads the job's control channel (one GetDataset call)
    # for a pause or cancel; 0: it does not listen, and runs to its limit when cancelled.
    control_poll_seconds: float = Field(
        default=60.0, ge=0, le=3600, strict=True, allow_inf_nan=False
    )
    # Session time a self-chaining segment keeps for publishing and pushing, until measured.
    chain_reserve_seconds: float = Field(
        default=120.0, ge=0, le=3600, strict=True, allow_inf_nan=False
    )
    # How a checkpoint reaches the next session (docs/kaggle.md, "Moving checkpoints"):
    # "kernel" (the session publishes it itself; needs enable_internet and the BATON_KAGGLE_KEY
    # Secret, and falls back to "orchestrator" without them), "orchestrator" (downloaded and
    # uploaded again by Baton), or "auto": "kernel" where the kernel has internet.
    transport: Literal["auto", "kernel", "orchestrator"] = "auto"
    # What one checkpoint is expected to hold, in bytes, where the memory planner cannot tell
    # (a trainer of the user's): checked against the session's writable space at submit.
    checkpoint_bytes: int | None = Field(default=None, ge=0, le=10**13, strict=True)
    # When the quota runs out: "wait" for Kaggle's weekly refresh, or "local": continue on the
    # orchestrator's local backend from the last verified checkpoint (where the operator allows
    # it, BATON_ALLOW_LOCAL_FALLBACK).
    on_quota_exhausted: Literal["wait", "local"] = "wait"

    @field_validator("dataset_sources", "kernel_sources")
    @classmethod
    def _sources_are_refs(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(SOURCE_PATTERN, value):
                raise ValueError(f"{value!r} is not owner/slug or owner/slug/version")
        return values

    @field_validator("model_sources")
    @classmethod
    def _models_are_refs(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(MODEL_SOURCE_PATTERN, value):
                raise ValueError(
                    f"{value!r} is not owner/model/framework/variation or "
                    "owner/model/framework/variation/version"
                )
        return values

    @field_validator("competition_sources")
    @classmethod
    def _competitions_are_slugs(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(COMPETITION_PATTERN, value):
                raise ValueError(f"{value!r} is not a competition slug")
        return values

    @field_validator("requirements")
    @classmethod
    def _requirements_are_plain(cls, values: list[str]) -> list[str]:
        for value in values:
            if len(value) > 200 or not re.fullmatch(REQUIREMENT_PATTERN, value):
                raise ValueError(f"{value!r} is not a plain pip requirement")
        return values

    @model_validator(mode="after")
    def _internet_for_what_needs_it(self) -> KaggleSpec:
        for name in ("requirements", "self_chain"):
            if getattr(self, name) and not self.enable_internet:
                raise field_error(
                    "KaggleSpec",
                    (name,),
                    f"{name} requires enable_internet: true",
                    getattr(self, name),
                )
        if self.transport == "kernel" and not self.enable_internet:
            message = "transport kernel requires enable_internet: true"
            raise field_error("KaggleSpec", ("transport",), message, self.transport)
        return self

    @property
    def kernel_transport(self) -> bool:
        """Whether each session publishes its own checkpoint (self-chaining ones always do)."""
        return not self.self_chain and self.enable_internet and self.transport != "orchestrator"

    @property
    def machine_shape(self) -> str | None:
        return MACHINE_SHAPES[self.accelerator]

    @property
    def uses_gpu(self) -> bool:
        return self.accelerator in (Accelerator.T4X2, Accelerator.P100)

    @property
    def max_session_seconds(self) -> float:
        return KAGGLE_SESSION_SECONDS.get(self.accelerator, KAGGLE_DEFAULT_SESSION_SECONDS)


# Slurm's own names: partitions, accounts, QOS (letters, digits, and . _ -).
SLURM_NAME_PATTERN = r"^[A-Za-z0-9][\w.-]*$"
# `--gres`: gpu, gpu:2, gpu:a100:2, several comma-separated.
SLURM_GRES_PATTERN = r"^[A-Za-z][\w.-]*(:[\w.-]+){0,2}(,[A-Za-z][\w.-]*(:[\w.-]+){0,2})*$"
# `--mem`: a number with an optional K/M/G/T unit.
SLURM_MEM_PATTERN = r"^[1-9][0-9]*[KMGT]?$"
# Extra sbatch options a spec may add (`--name=value`). Baton sets the rest itself: --time,
# --job-name, --comment, --output, --signal, --chdir, --export and the resources above.
SLURM_EXTRA_OPTIONS = frozenset(
    {
        "--constraint",
        "--exclude",
        "--nodelist",
        "--reservation",
        "--mail-type",
        "--mail-user",
        "--gpus-per-node",
        "--gpus",
        "--nice",
        "--licenses",
        "--exclusive",
        "--hint",
    }
)
SLURM_OPTION_VALUE_PATTERN = r"^[\w.,:@+\[\]=-]*$"
# Slurm counts walltime in whole minutes.
SLURM_MIN_SESSION_SECONDS = 60.0


class SlurmSpec(BaseModel):
    """How a job's segments run as Slurm batch jobs: one `sbatch` per segment."""

    model_config = ConfigDict(extra="forbid")

    partition: str | None = Field(default=None, max_length=64, pattern=SLURM_NAME_PATTERN)
    account: str | None = Field(default=None, max_length=64, pattern=SLURM_NAME_PATTERN)
    qos: str | None = Field(default=None, max_length=64, pattern=SLURM_NAME_PATTERN)
    gres: str | None = Field(default=None, max_length=128, pattern=SLURM_GRES_PATTERN)
    # CPUs for the segment's one task (all its ranks share the allocation).
    cpus: int = Field(default=1, ge=1, le=1024, strict=True)
    mem: str | None = Field(default=None, max_length=16, pattern=SLURM_MEM_PATTERN)
    # Further sbatch options from SLURM_EXTRA_OPTIONS, each "--name=value" (or a bare "--name").
    sbatch_options: list[str] = Field(default_factory=list, max_length=20)

    @field_validator("sbatch_options")
    @classmethod
    def _options_allowed(cls, values: list[str]) -> list[str]:
        for value in values:
            name, _, argument = value.partition("=")
            if name not in SLURM_EXTRA_OPTIONS:
                allowed = ", ".join(sorted(SLURM_EXTRA_OPTIONS))
                raise ValueError(
                    f"{name[:40]!r} is not an sbatch option Baton passes on ({allowed})"
                )
            if len(value) > 200 or not re.fullmatch(SLURM_OPTION_VALUE_PATTERN, argument):
                raise ValueError(f"the value of {name} holds characters sbatch options never need")
        return values


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=NAME_PATTERN)
    backend: Literal["local", "kaggle", "slurm"]
    trainer: str = Field(max_length=256, pattern=TRAINER_PATTERN)
    config: dict[str, Any] = Field(default_factory=dict)
    total_steps: int = Field(gt=0, le=10**9, strict=True)
    seed: int = Field(default=0, ge=0, le=2**32 - 1, strict=True)
    session: SessionSpec
    retry: RetrySpec = Field(default_factory=RetrySpec)
    kaggle: KaggleSpec | None = None
    slurm: SlurmSpec | None = None
    # Ranks per session (torchrun): 2 uses both GPUs of a t4x2; locally, CPU ranks over gloo.
    nproc: int = Field(default=1, ge=1, le=MAX_NPROC, strict=True)
    # Webhooks told when the job ends, waits for quota, or a segment fails (secrets: never shown).
    notify: NotifySpec | None = None
    # Trackers that get the job's metrics, one run over all its sessions (writing-a-trainer.md).
    trackers: TrackersSpec | None = None
    # Checkpoints whose files a succeeded job keeps, newest first: by default only its final
    # one (a running job keeps the server's `keep_checkpoints`; on Kaggle, `keep_versions`).
    keep_when_done: int = Field(default=1, ge=1, le=1000, strict=True)

    @model_validator(mode="after")
    def _kaggle_options_fit(self) -> JobSpec:
        if self.backend == "kaggle" and self.kaggle is None:
            self.kaggle = KaggleSpec()
        if self.backend != "kaggle" and self.kaggle is not None:
            raise field_error("JobSpec", ("kaggle",), "kaggle options need backend: kaggle", None)
        self._slurm_options_fit()
        limit = self.session.limit_seconds
        if self.kaggle is not None and limit > self.kaggle.max_session_seconds:
            message = (
                f"Kaggle ends {self.kaggle.accelerator} sessions after "
                f"{self.kaggle.max_session_seconds:g} s"
            )
            raise field_error("JobSpec", ("session", "limit_seconds"), message, limit)
        if (
            self.kaggle is not None
            and self.kaggle.uses_gpu
            and self.trainer.startswith(BATON_LM_TRAINERS)
        ):
            # Baton's own LM trainers: their config keys are what the memory planner reads.
            try:
                advice = check_t4_job(self.config, self.nproc)
            except (TypeError, ValueError, AttributeError, OverflowError) as exc:
                # The config is the user's: a value of the wrong type is their mistake, not a 500.
                message = f"config does not describe a model the memory planner can size: {exc}"
                raise field_error("JobSpec", ("config",), message[:300], None) from None
            if not advice.fits:
                raise field_error("JobSpec", ("config",), advice.message(), None)
        if self.kaggle is not None:
            self._checkpoint_fits_kaggle(self.kaggle)
        return self

    def _slurm_options_fit(self) -> None:
        if self.backend == "slurm" and self.slurm is None:
            self.slurm = SlurmSpec()
        if self.backend != "slurm" and self.slurm is not None:
            raise field_error("JobSpec", ("slurm",), "slurm options need backend: slurm", None)
        limit = self.session.limit_seconds
        if self.slurm is not None and limit < SLURM_MIN_SESSION_SECONDS:
            message = f"Slurm's walltime is whole minutes: at least {SLURM_MIN_SESSION_SECONDS:g} s"
            raise field_error("JobSpec", ("session", "limit_seconds"), message, limit)

    def predicted_checkpoint_bytes(self) -> int | None:
        """What one checkpoint holds before any was committed: kaggle.checkpoint_bytes, or the
        memory planner's size for Baton's LM trainers; None where neither tells."""
        if self.kaggle is not None and self.kaggle.checkpoint_bytes is not None:
            return self.kaggle.checkpoint_bytes
        if self.trainer.startswith(BATON_LM_TRAINERS):
            return math.ceil(checkpoint_size(self.config, self.nproc).total)
        return None

    def _checkpoint_fits_kaggle(self, kaggle: KaggleSpec) -> None:
        """Refuse, before anything is pushed, a checkpoint that cannot fit the session's 20 GB
        /kaggle/working or the account's private dataset storage with the versions kept."""
        predicted = self.predicted_checkpoint_bytes()
        if predicted is None:
            return
        size = float(predicted)
        where: tuple[str, ...] = ("kaggle", "checkpoint_bytes")
        fix = "save less per checkpoint"
        if kaggle.checkpoint_bytes is None:
            weights = checkpoint_size(self.config, self.nproc).weights
            where = ("config",)
            fix = (
                f"train LoRA adapters only (lora: {{...}}), or save without optimizer state "
                f"where the trainer allows it (then about {weights / GB:.1f} GB)"
            )
        if size > KAGGLE_WORKING_BYTES:
            message = (
                f"a checkpoint of about {size / GB:.1f} GB cannot fit Kaggle's "
                f"{KAGGLE_WORKING_BYTES / GB:.0f} GB /kaggle/working: {fix}"
            )
            raise field_error("JobSpec", where, message, None)
        held = max(kaggle.keep_versions, 1) + 1  # the kept ones, plus the one being published
        if size * held > KAGGLE_PRIVATE_STORAGE_BYTES:
            fitting = max(int(KAGGLE_PRIVATE_STORAGE_BYTES // size) - 1, 0)
            message = (
                f"{held} checkpoints of about {size / GB:.1f} GB exceed Kaggle's "
                f"{KAGGLE_PRIVATE_STORAGE_BYTES / GB:.0f} GB of private dataset storage: "
                + (f"set keep_versions to {fitting}" if fitting else fix)
            )
            raise field_error("JobSpec", ("kaggle", "keep_versions"), message, kaggle.keep_versions)

    @field_validator("config")
    @classmethod
    def _config_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_values(value, "config")
        size = len(json.dumps(value, default=str))
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"config is {size} bytes; the limit is {MAX_CONFIG_BYTES}")
        return value


def check_json_values(value: Any, where: str, depth: int = 0) -> None:
    """Refuse what a JSON column would silently change or the database refuses to store.

    A NaN or Infinity would be stored as null; a NUL character or a lone surrogate makes
    PostgreSQL (and UTF-8 itself) fail.
    """
    if depth > 32:
        raise ValueError(f"{where} is nested more than 32 levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} holds {value}: only finite numbers are allowed")
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(str(key), f"{where} key")
            check_json_values(item, f"{where}.{str(key)[:40]}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_values(item, f"{where}[{index}]", depth + 1)


def check_text(value: str, where: str) -> None:
    if "\x00" in value:
        raise ValueError(f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} contains a lone surrogate, which is not valid text") from None


def spec_warnings(spec: dict[str, Any]) -> list[str]:
    """Things the user should know about a stored spec that do not make it invalid."""
    warnings = [
        f"the server cannot write to {name}: its library is not installed there "
        "(pip install 'baton[trackers]'); the job runs without it"
        for name in missing_libraries(spec.get("trackers"))
    ]
    if (spec.get("kaggle") or {}).get("accelerator") == Accelerator.P100.value:
        warnings.append(
            "P100 was retired on 2026-09-15: Kaggle runs P100 requests on T4 x2, so this job "
            "is pushed as t4x2 (NvidiaTeslaT4)."
        )
    return warnings


def load_spec_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON spec file into a dict (validated later, by the API)."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a spec must be a mapping")
    return data


def stored_spec(data: dict[str, Any]) -> JobSpec:
    """The spec as submitted. It was validated then; the trainer is not looked up again."""
    return JobSpec.model_validate(data, context={"stored": True})
