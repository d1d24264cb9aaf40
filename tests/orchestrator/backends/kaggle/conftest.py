"""An emulator per test, and Baton's Kaggle account on it through the real client."""

from tests.support.kaggle import alice, emulator

__all__ = ["alice", "emulator"]
