"""A Kaggle API emulator: a real HTTP server that the official kagglesdk/kaggle clients talk to.

    with start_emulator(tmp_path, week_seconds=30) as emulator:
        client = emulator.client()          # kagglesdk.KaggleClient, Basic auth
        api = emulator.kaggle_api()         # kaggle.api.KaggleApi, for blob uploads

See docs/kaggle-emulator.md.
"""

from tests.kaggle_emulator.clock import Clock, JumpClock, ManualClock, SystemClock
from tests.kaggle_emulator.emulator import Emulator, start_emulator
from tests.kaggle_emulator.faults import FaultKind, Faults
from tests.kaggle_emulator.options import EmulatorOptions

__all__ = [
    "Clock",
    "Emulator",
    "EmulatorOptions",
    "FaultKind",
    "Faults",
    "JumpClock",
    "ManualClock",
    "SystemClock",
    "start_emulator",
]
