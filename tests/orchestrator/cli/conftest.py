"""The CLI's environment: the server's data dir, the admin token, and a config file of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    monkeypatch.setenv("BATON_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("BATON_ADMIN_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("BATON_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("BATON_CONFIG", str(tmp_path / "baton-config.toml"))
    monkeypatch.delenv("BATON_URL", raising=False)
    return settings
