"""docker-compose.yml and the Dockerfile: valid Compose, healthy layout, no secrets baked in.

This machine has no container engine, so the file is checked against the Compose specification's
own JSON schema (shipped beside this test: tests/deploy/compose-spec.json, from compose-spec at
170098b), and every command it runs is parsed by Baton's real CLI. tests/scale/ runs the same
process layout without containers.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
import yaml
from alembic import command

from orchestrator.cli.app import app as baton_app
from orchestrator.migrate import alembic_config
from tests.factories import live_server, make_settings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).parent / "compose-spec.json").read_text())
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY", re.IGNORECASE)
# `${NAME:?message}`: compose refuses to start unless the operator sets NAME.
REQUIRED_FROM_ENV = re.compile(r"\$\{[A-Z_]+:\?[^}]*\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [error.message for error in validator.iter_errors(document)]


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    assert _errors(compose) == []


def test_the_schema_check_catches_a_broken_file(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["api"]["depends_on"]["prestart"]["condition"] = "when_ready"
    broken["services"]["worker"]["restart_policy"] = "always"  # not a Compose key
    assert len(_errors(broken)) == 2


def test_every_long_running_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "api", "worker", "beat"):
        assert services[name]["healthcheck"]["test"], name


def test_migrations_run_once_before_api_worker_and_beat(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["prestart"]["command"] == ["baton", "migrate"]
    assert services["prestart"]["restart"] == "no"
    for name in ("api", "worker", "beat"):
        prestart = services[name]["depends_on"]["prestart"]
        assert prestart == {"condition": "service_completed_successfully"}, name


def test_every_baton_command_in_compose_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    services = list(compose["services"].values())
    commands = [service["command"] for service in services if "command" in service]
    commands += [
        shlex.split(service["healthcheck"]["test"][1])
        if service["healthcheck"]["test"][0] == "CMD-SHELL"
        else service["healthcheck"]["test"][1:]
        for service in services
        if "healthcheck" in service
    ]
    baton = [command[1:] for command in commands if command[0] == "baton"]
    assert len(baton) >= 5
    for argv in baton:
        _parse(argv)


def _parse(argv: list[str]) -> None:
    """Parse a command line as `baton` would, without running it (a bad option raises)."""
    group = typer.main.get_command(baton_app)
    with typer.Context(group, info_name="baton") as ctx:
        command = group.get_command(ctx, argv[0])  # type: ignore[attr-defined]
        if command is None:
            raise LookupError(f"no command {argv[0]}")
        command.make_context(argv[0], list(argv[1:]), parent=ctx).close()


def test_the_parse_check_rejects_unknown_commands_and_options() -> None:
    _parse(["beat", "--check", "--max-age", "60"])
    with pytest.raises(typer.TyperException, match="--every"):
        _parse(["beat", "--every", "5"])
    with pytest.raises(LookupError):
        _parse(["scheduler"])


def test_services_share_one_configuration_and_the_local_host_is_the_worker(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in ("prestart", "api", "worker", "beat"):
        environment = services[name]["environment"]
        assert environment["BATON_RECONCILER"] == "celery"
        assert environment["BATON_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert environment["BATON_LOCAL_HOST"] == services["worker"]["hostname"]


def test_secrets_come_from_the_environment_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert REQUIRED_FROM_ENV.fullmatch(str(value)), f"{name}.{key} is baked in"
            if "://" in str(value) and "@" in str(value):
                assert REQUIRED_FROM_ENV.search(str(value)), f"{name}.{key} embeds a password"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith(("ENV ", "ARG ")):
            assert not SECRET_NAME.search(line), line


def _stages(dockerfile: str) -> dict[str, str]:
    stages: dict[str, str] = {}
    name = None
    for line in dockerfile.splitlines():
        match = re.match(r"FROM \S+ AS (\S+)", line)
        if match:
            name = match.group(1)
            stages[name] = ""
        elif name is not None:
            stages[name] += line + "\n"
    return stages


def test_only_the_worker_image_installs_torch(compose: dict[str, Any]) -> None:
    stages = _stages((ROOT / "Dockerfile").read_text())
    assert "torch" not in stages["orchestrator"]
    assert ".[train]" not in stages["orchestrator"]
    assert ".[train]" in stages["worker"]
    targets = {
        name: service.get("build", {}).get("target")
        for name, service in compose["services"].items()
    }
    assert targets["worker"] == "worker"
    assert targets["api"] == targets["beat"] == targets["prestart"] == "orchestrator"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [dep for dep in project["dependencies"] if dep.startswith("torch")]


def test_the_api_healthcheck_asks_readyz_and_fails_on_a_schema_behind(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    api = compose["services"]["api"]
    port = api["command"][api["command"].index("--port") + 1]
    kind, python, *argv = api["healthcheck"]["test"]
    assert (kind, python) == ("CMD", "python")
    assert f"http://127.0.0.1:{port}/readyz" in argv[-1]
    settings = make_settings(tmp_path / "data")
    with live_server(settings, embedded_loop=False) as url:
        check = [sys.executable, *argv[:-1], argv[-1].replace(f"http://127.0.0.1:{port}", url)]
        assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0
        command.downgrade(alembic_config(settings.resolved_database_url), "0002")
        behind = subprocess.run(check, capture_output=True, timeout=30)
        assert behind.returncode != 0
        assert b"HTTP Error 503" in behind.stderr
