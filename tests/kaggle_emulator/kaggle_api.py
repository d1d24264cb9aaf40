"""The high-level KaggleApi (blob uploads, dataset zips) calling an emulator.

KaggleApi builds every client in `build_kaggle_client`, so this subclass overrides exactly that
method. Importing `kaggle` runs its package __init__, which tries to authenticate and prints
help when no credentials are configured; that is why this lives apart from client.py.
"""

from __future__ import annotations

from kaggle.api.kaggle_api_extended import KaggleApi
from kagglesdk import KaggleClient, KaggleEnv

from tests.kaggle_emulator.client import point_at


class EmulatorKaggleApi(KaggleApi):
    """KaggleApi authenticated with a username/key, calling the emulator at `url`."""

    def __init__(self, url: str, username: str, key: str) -> None:
        self._emulator_url = url
        self.config_values = {self.CONFIG_NAME_USER: username, self.CONFIG_NAME_KEY: key}
        self._authenticated = True

    def build_kaggle_client(self) -> KaggleClient:
        client = KaggleClient(
            env=KaggleEnv.TEST,
            username=self.config_values[self.CONFIG_NAME_USER],
            password=self.config_values[self.CONFIG_NAME_KEY],
            response_processor=self.get_response_processor(),
        )
        return point_at(client, self._emulator_url)
