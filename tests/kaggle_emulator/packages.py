"""The package index a kernel with internet reaches: PyPI, as far as a session's pip sees it.

Kernels are pointed at it through pip's own configuration (`PIP_FIND_LINKS` to `/pypi/` on the
kernels' port, `PIP_NO_INDEX`: no test ever reaches the real PyPI); a kernel with internet off
gets an address that refuses connections, as Kaggle's sessions without internet have no route
out. The index is a folder of distributions a test builds (`options.package_index`). Each file
downloaded is counted and held `package_download_seconds` (docs/kaggle-emulator.md, "Costs":
the time a session's `pip install` of a typical requirement set takes, charged per file, as the
tests' requirement sets are one file), so a session that installs offline from a mounted wheel
set is seen downloading nothing.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "pypi"


@dataclass
class PackageIndex:
    folder: Path | None
    download_seconds: float = 0.0
    downloads: list[tuple[str, float]] = field(default_factory=list)  # (file, when)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def page(self) -> bytes:
        """The find-links page: one link per distribution."""
        names = sorted(p.name for p in self.folder.iterdir() if p.is_file()) if self.folder else []
        links = "".join(
            f'<a href="/{PREFIX}/{html.escape(n)}">{html.escape(n)}</a>\n' for n in names
        )
        return f"<html><body>\n{links}</body></html>\n".encode()

    def download(self, name: str) -> bytes | None:
        """A distribution's bytes, after the download's cost; None where there is none."""
        if self.folder is None or "/" in name or not (self.folder / name).is_file():
            return None
        with self._lock:
            self.downloads.append((name, time.time()))
        if self.download_seconds > 0:
            time.sleep(self.download_seconds)
        return (self.folder / name).read_bytes()
