"""Where the CLI finds the server and its token: flags, then the environment, then a config file.

The config file is TOML (`url`, `token`) at `$BATON_CONFIG`, or `baton/config.toml` in the
user's config directory; it is written with mode 0600 because it holds a token.
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs

from orchestrator.cli.errors import CliError

DEFAULT_URL = "http://127.0.0.1:8000"
KEYS = ("url", "token")


def check_url(value: str) -> str:
    """A server URL as the CLI can use it: http(s)://HOST[:PORT][/PATH]."""
    url = value.strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(f"{value!r} is not a server URL: give http://HOST:PORT or https://HOST")
    return url.rstrip("/")


def config_path() -> Path:
    configured = os.environ.get("BATON_CONFIG")
    if configured:
        return Path(configured)
    return Path(platformdirs.user_config_dir("baton")) / "config.toml"


def read_config(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CliError(f"cannot read the config file {path}: {exc}") from None
    return {key: str(data[key]) for key in KEYS if key in data}


def write_config(path: Path, values: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A JSON string is a valid TOML basic string.
    text = "".join(f"{key} = {json.dumps(values[key])}\n" for key in KEYS if key in values)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Target:
    url: str
    token: str


def resolve_url(flag: str | None) -> str:
    return flag or os.environ.get("BATON_URL") or read_config(config_path()).get("url", DEFAULT_URL)


def resolve_token() -> str:
    token = os.environ.get("BATON_TOKEN") or read_config(config_path()).get("token")
    if token:
        return token
    # The admin token file of the server running here (or of BATON_DATA_DIR), if there is one.
    # Only here, where no token was given: finding the server costs a tenth of a second.
    from orchestrator.cli.live_server import server_settings

    with contextlib.suppress(CliError):
        token_file = server_settings().admin_token_file
        if token_file.exists():
            return token_file.read_text().strip()
    raise CliError(
        "no API token: set BATON_TOKEN or run `baton config set token` "
        "(on the server's machine, `baton token NAME` makes one for NAME)"
    )
