"""Model, competition and kernel-output sources of a push, and where a session mounts them.

- Models: `owner/model/framework/variation[/version]`, five parts at most, four at least
  (kagglesdk's ApiSaveKernelRequest.model_data_sources; the kaggle CLI requires them so).
  Without a version the latest is mounted. Mounted at `input/models/<owner>/<model>/
  <framework>/<variation>/<version>` (the layout kagglehub and newer images use).
- Competitions: the competition's slug, mounted at `input/competitions/<slug>`.
- Kernel outputs: `owner/slug[/version]`, mounted at `input/notebooks/<owner>/<slug>` (newer
  images; `kernel_mount_layout="flat"` is the old `input/<slug>`). A pinned version is mounted
  as named, unless `pinned_kernel_sources_dropped` (first contact, issue 17: a pinned kernel
  source was seen accepted and silently dropped, the latest version mounted instead).

Models and competitions exist only as the test gives them (`EmulatorOptions.models`,
`competitions`): a directory of files per model version or competition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.kaggle_emulator.kernel_sessions import Mount

_PART = r"[A-Za-z0-9][\w.-]*"
_MODEL = re.compile(rf"^({_PART}/{_PART}/{_PART}/{_PART})(?:/(\d+))?$")


@dataclass
class DataSources:
    # "owner/model/framework/variation/version" -> its files
    models: dict[str, Path] = field(default_factory=dict)
    # competition slug -> its data
    competitions: dict[str, Path] = field(default_factory=dict)
    kernel_mount_layout: str = "notebooks"
    pinned_kernel_sources_dropped: bool = False

    def model(self, source: str) -> Mount | None:
        match = _MODEL.fullmatch(source)
        if match is None:
            return None
        base, number = match.group(1), match.group(2)
        versions = sorted(
            int(key.rsplit("/", 1)[1]) for key in self.models if key.rsplit("/", 1)[0] == base
        )
        if not versions:
            return None
        version = int(number) if number else versions[-1]
        if version not in versions:
            return None
        return Mount(f"models/{base}/{version}", self.models[f"{base}/{version}"])

    def competition(self, source: str) -> Mount | None:
        directory = self.competitions.get(source)
        return Mount(f"competitions/{source}", directory) if directory is not None else None

    def kernel_source(self, source: str) -> tuple[str, int | None] | None:
        """The kernel ref and the version whose output to mount (None: the latest)."""
        parts = source.split("/")
        if len(parts) == 2:
            return source, None
        if len(parts) == 3 and parts[2].isdigit():
            pinned = None if self.pinned_kernel_sources_dropped else int(parts[2])
            return "/".join(parts[:2]), pinned
        return None

    def kernel_mount_name(self, owner: str, slug: str) -> str:
        return slug if self.kernel_mount_layout == "flat" else f"notebooks/{owner}/{slug}"
