"""The two network links bytes cross, their bandwidths, and what crossed each.

Kaggle's API is reached from two places: the orchestrator's machine (a user's home or office
line) and a running kernel (Google's network). The emulator listens on one port for each, so it
knows which link a blob upload or a file download crossed, charges it the link's bandwidth (the
request is held for bytes / rate seconds) and counts the bytes. `size_scale` makes every byte
count as that many for the time charged, so a benchmark can emulate a 7 GB checkpoint's costs
with a 7 MB file; the counters always hold real bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

ORCHESTRATOR = "orchestrator"
KAGGLE = "kaggle"
LINKS = (ORCHESTRATOR, KAGGLE)


@dataclass
class LinkCounters:
    uploaded: int = 0
    downloaded: int = 0
    seconds_charged: float = 0.0


@dataclass
class Links:
    """Bandwidths (bytes a second; None: free) and counters per link."""

    rates: dict[str, dict[str, float | None]]
    size_scale: float = 1.0
    counters: dict[str, LinkCounters] = field(
        default_factory=lambda: {link: LinkCounters() for link in LINKS}
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, link: str, direction: str, size: int) -> None:
        """Count `size` bytes crossing `link` ("up" or "down") and hold the caller for them."""
        rate = self.rates.get(link, {}).get(direction)
        seconds = size * self.size_scale / rate if rate else 0.0
        with self._lock:
            counters = self.counters[link]
            if direction == "up":
                counters.uploaded += size
            else:
                counters.downloaded += size
            counters.seconds_charged += seconds
        if seconds > 0:
            time.sleep(seconds)

    def crossed(self, link: str = ORCHESTRATOR) -> int:
        """Bytes uploaded plus downloaded over `link` so far."""
        with self._lock:
            counters = self.counters[link]
            return counters.uploaded + counters.downloaded
