"""The emulator's image points kagglesdk at the emulator, on whatever port it listens.

kagglesdk's `KaggleEnv.TEST` is fixed to http://localhost:7777. The emulator listens on an
ephemeral port (tests run side by side), so a session's unmodified client (KAGGLE_API_ENVIRONMENT
=TEST) is redirected here to BATON_KAGGLE_API_URL, the way Kaggle's own image configures its
client. kagglesdk is patched when it is first imported, so sessions that never use it pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

_MODULE = "kagglesdk.kaggle_env"


class _RedirectTestEndpoint(importlib.abc.MetaPathFinder):
    def __init__(self, url: str) -> None:
        self.url = url

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, url = spec.loader, self.url
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            module._env_to_endpoint[module.KaggleEnv.TEST] = url

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_url = os.environ.get("BATON_KAGGLE_API_URL", "").rstrip("/")
if _url:
    sys.meta_path.insert(0, _RedirectTestEndpoint(_url))
