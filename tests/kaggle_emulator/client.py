"""A real kagglesdk KaggleClient pointed at an emulator.

kagglesdk 0.1.37 has no public endpoint override: `KaggleEnv.TEST` is fixed to
http://localhost:7777 and KAGGLE_API_ENVIRONMENT only picks among fixed environments. For any
other port the client's one endpoint attribute is set here, in one place.
"""

from __future__ import annotations

from kagglesdk import KaggleClient, KaggleEnv
from kagglesdk.kaggle_env import get_endpoint

TEST_ENDPOINT = get_endpoint(KaggleEnv.TEST)


def emulator_client(url: str, username: str, key: str) -> KaggleClient:
    """A KaggleClient (Basic auth) that calls the emulator at `url`."""
    return point_at(KaggleClient(env=KaggleEnv.TEST, username=username, password=key), url)


def point_at(client: KaggleClient, url: str) -> KaggleClient:
    if url.rstrip("/") != TEST_ENDPOINT:
        client.http_client()._endpoint = url.rstrip("/")
    return client
