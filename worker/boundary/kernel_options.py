"""What a Kaggle kernel is told besides its segment: the kernel options.

The orchestrator's Kaggle backend builds them for each push; the kernel script embeds them as
JSON (worker.kaggle_access.kernel_script), and the session (worker.kaggle_session) and a
self-chaining kernel (worker.kaggle_access.chaining) read them back through `KernelOptions`,
never by key. A self-chaining kernel passes them on to its successor. No secret, ever: the key
comes only from a Kaggle Secret the user attached.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SelfChain:
    """What a kernel needs to push its own successor the way the orchestrator would."""

    username: str
    kernel_slug: str
    # worker.kaggle_access.kernels.KernelPush's fields: the successor is pushed the same way.
    push: dict[str, Any]
    # False: the account refuses pinned sources (`owner/slug/N`), name the dataset unpinned;
    # None: not measured.
    pinned_sources: bool | None = None
    uses_quota: bool = False  # an accelerator push: size the successor to the quota left
    tpu: bool = False  # ...the TPU quota rather than the GPU one
    quota_reserve_seconds: float = 0.0
    min_session_seconds: float = 0.0


@dataclass(frozen=True)
class KernelControl:
    """Where the owner's pause or cancel reaches a running kernel: the newest version's notes of
    a private dataset (worker.kaggle_access.control), read every `poll_seconds`."""

    username: str
    dataset: str
    poll_seconds: float


@dataclass(frozen=True)
class Publish:
    """The in-kernel transport: the session publishes its own checkpoint as `dataset` before it
    exits (worker.kaggle_access.publish), so it never crosses the orchestrator's link."""

    username: str
    dataset: str


@dataclass(frozen=True)
class WheelSet:
    """Where the job's requirements are kept built as wheels (worker/wheelhouse.py): a private
    dataset of `username` named from a hash of the requirements and the image. `attached`: the
    orchestrator mounted a READY version of it, so the session installs offline from it; where
    none is mounted, a session with internet and the key builds it and publishes it there."""

    username: str
    dataset: str
    attached: bool = False


@dataclass(frozen=True)
class KernelOptions:
    checkpoint_dataset: str  # the slug the job's checkpoints are published under
    requirements: list[str] = field(default_factory=list)  # pip-installed before training
    # The accelerator the push asked for: the session checks it has it (kaggle-api #1197).
    promised_gpus: int = 0
    promised_tpu: bool = False
    # The resumed checkpoint's file in its dataset (None for a first segment).
    checkpoint_file: str | None = None
    # Measured by `baton kaggle check`: where this account's kernels mount the checkpoint
    # (looked at first), and how long the container ran before the kernel's process started.
    checkpoint_mount: str | None = None
    boot_offset_seconds: float = 0.0
    chain: SelfChain | None = None  # set for self-chaining jobs
    control: KernelControl | None = None  # set where the kernel can hear pause and cancel
    publish: Publish | None = None  # set where the kernel publishes its own checkpoint
    wheels: WheelSet | None = None  # set where the requirements are kept as a wheel set

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelOptions:
        chain, control, publish = data.get("chain"), data.get("control"), data.get("publish")
        wheels = data.get("wheels")
        return cls(
            **{
                **data,
                "chain": SelfChain(**chain) if chain else None,
                "control": KernelControl(**control) if control else None,
                "publish": Publish(**publish) if publish else None,
                "wheels": WheelSet(**wheels) if wheels else None,
            }
        )
