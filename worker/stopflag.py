"""A stop flag that SIGTERM and SIGINT set, polled by the training loop between steps.

The handler only records the signal. Checkpointing from a handler would run arbitrary code at an
arbitrary bytecode boundary, possibly inside an optimizer step or a half-written file.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopFlag:
    """Set once a stop was requested; `install` routes signals to it until `restore`."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, _Handler] = {}

    @property
    def is_set(self) -> bool:
        return self.signum is not None

    def set(self, signum: int = signal.SIGTERM) -> None:
        if self.signum is None:
            self.signum = signum

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.set(signum)

    def install(self, signals: Iterable[int] = DEFAULT_SIGNALS) -> StopFlag:
        for signum in signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> StopFlag:
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()
