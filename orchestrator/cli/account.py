"""Commands about who you are to Baton: API tokens, Kaggle credentials, the CLI's config file."""

from __future__ import annotations

import getpass
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from orchestrator.cli import render
from orchestrator.cli.context import connect
from orchestrator.cli.errors import CliError, operator_errors
from orchestrator.cli.settings import KEYS, check_url, config_path, read_config, write_config
from orchestrator.clock import utcnow

if TYPE_CHECKING:
    from orchestrator.wire import TokenIn

# The wire models (and pydantic) are imported inside the commands that send or read them.


class _CreateByDefault(TyperGroup):
    """`baton token alice` (today's form) means `baton token create alice`."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["create", *args]
        return super().resolve_command(ctx, args)


token_app = typer.Typer(
    cls=_CreateByDefault, help="Create, list and revoke API tokens.", no_args_is_help=True
)


_DURATION = re.compile(r"^(\d+)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_expiry(value: str, now: datetime) -> datetime:
    """`30d`, `12h`, `90m`, `2w` from now, or an ISO 8601 time with its UTC offset."""
    duration = _DURATION.match(value.strip())
    if duration:
        return now + timedelta(**{_UNITS[duration[2]]: int(duration[1])})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise CliError(
            f"--expires {value!r}: give a duration (30d, 12h, 90m, 2w) or an ISO 8601 time "
            "with its offset (2027-01-31T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise CliError(f"--expires {value!r}: add the UTC offset (Z or +01:00)")
    return moment


def _token_request(label: str, expires: str | None) -> TokenIn:
    """The API's own model checks the label and the expiry (in the future, under 10 years)."""
    from pydantic import ValidationError

    from orchestrator.wire import TokenIn

    expires_at = parse_expiry(expires, utcnow()) if expires is not None else None
    try:
        return TokenIn(name=label, expires_at=expires_at)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'token'}: {e['msg']}" for e in exc.errors()
        )
        raise CliError(f"cannot create the token: {problems}") from None


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    user: Annotated[
        str | None,
        typer.Argument(
            help="on the server's machine: the user (created if new); "
            "left out: a token for yourself, through the API"
        ),
    ] = None,
    label: Annotated[str, typer.Option(help="a name for the token")] = "cli",
    expires: Annotated[
        str | None,
        typer.Option(help="when the token stops working: 30d, 12h, 90m, 2w or an ISO 8601 time"),
    ] = None,
) -> None:
    """Print a new API token, once: for USER (on the server's machine) or for yourself."""
    from orchestrator.wire import NewToken

    request = _token_request(label, expires)
    if user is None:
        with connect(ctx) as client:
            created: NewToken = client.call(
                "POST", "/api/v1/tokens", NewToken, body=request.model_dump(mode="json")
            )
        print(created.token)
        return
    # On the server's machine: its own database, loaded only for this form of the command.
    from orchestrator.auth import issue_token
    from orchestrator.config import Settings
    from orchestrator.db import Database
    from orchestrator.service import prestart

    settings = Settings()
    with operator_errors():
        prestart(settings)
    db = Database(settings.resolved_database_url)
    try:
        with db.transaction() as session:
            token = issue_token(session, user, request.name, expires_at=request.expires_at)
    finally:
        db.dispose()
    # Shown once, to the person who asked for it; only its hash is stored.
    print(token)


@token_app.command("list")
def token_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """Your API tokens (ids and names; never the tokens)."""
    from orchestrator.wire import TokenOut

    with connect(ctx) as client:
        rows: list[TokenOut] = client.call("GET", "/api/v1/tokens", list[TokenOut])
    if as_json:
        render.print_json(rows)
        return
    for row in rows:
        expires = f"  expires {row.expires_at:%Y-%m-%d %H:%M}" if row.expires_at else ""
        mark = "  (this one)" if row.current else ""
        render.console.print(
            f"{row.id}  {row.name}  created {row.created_at:%Y-%m-%d}{expires}{mark}"
        )


_TOKEN_ID = re.compile(r"^t[0-9a-f]{12}$")


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context, token_id: Annotated[str, typer.Argument(help="the token's id")]
) -> None:
    """Revoke one of your API tokens by its id (`baton token list`)."""
    if not _TOKEN_ID.match(token_id):
        # Perhaps the token itself: never echoed, never sent.
        raise CliError(
            "give the token's id (like t0123456789ab, from `baton token list`), not the token"
        )
    with connect(ctx) as client:
        client.request("DELETE", f"/api/v1/tokens/{token_id}")
    print(f"revoked token {token_id}")


def _read_key(key_file: Path | None) -> str:
    # Never from argv: a command line is visible to every user in the process list.
    if key_file is not None:
        try:
            return key_file.read_text().strip()
        except OSError as exc:
            # Without the path: someone who typed the key there would see it echoed back.
            raise CliError(f"cannot read --key-file: {exc.strerror}") from None
    if sys.stdin.isatty():
        return getpass.getpass("Kaggle API key: ").strip()
    return sys.stdin.read().strip()


def kaggle_credentials(
    ctx: typer.Context,
    username: Annotated[str, typer.Option(help="your Kaggle user name")],
    key_file: Annotated[
        Path | None, typer.Option(help="a file holding the API key; default: read stdin")
    ] = None,
) -> None:
    """Store your Kaggle user name and API key (the key is read from stdin or a file)."""
    from pydantic import ValidationError

    from orchestrator.wire import KaggleCredentialsIn, KaggleCredentialsOut

    try:
        body = KaggleCredentialsIn(username=username, key=_read_key(key_file))
    except ValidationError as exc:
        # Name the field and the rule, never the rejected value: it may be the key.
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CliError(f"invalid Kaggle credentials: {problems}") from None
    with connect(ctx) as client:
        stored: KaggleCredentialsOut = client.call(
            "PUT", "/api/v1/credentials/kaggle", KaggleCredentialsOut, body=body.model_dump()
        )
    print(f"stored Kaggle credentials for {stored.username} (updated {stored.updated_at})")


config_app = typer.Typer(help="The CLI's server URL and token (env BATON_URL/BATON_TOKEN win).")


@config_app.command("show")
def config_show() -> None:
    """Print the config file's settings (the token only by its first characters)."""
    path = config_path()
    values = read_config(path)
    print(f"config file: {path}")
    for key in KEYS:
        value = values.get(key)
        shown = (value[:6] + "…" if key == "token" else value) if value else "(unset)"
        print(f"{key} = {shown}")


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="url or token")],
    value: Annotated[
        str | None, typer.Argument(help="the url; a token is read from stdin instead")
    ] = None,
) -> None:
    """Set `url URL`, or `token` (read from stdin or a prompt, never from the command line)."""
    if key not in KEYS:
        raise CliError(f"unknown setting {key!r}: use one of {', '.join(KEYS)}")
    if key == "token":
        if value is not None:
            raise CliError("pass the token on stdin, not on the command line")
        value = getpass.getpass("API token: ") if sys.stdin.isatty() else sys.stdin.read()
    elif value is None:
        raise CliError("give the URL: baton config set url http://HOST:PORT")
    else:
        value = check_url(value)
    path = config_path()
    values: dict[str, Any] = read_config(path)
    values[key] = value.strip()
    write_config(path, values)
    print(f"{key} saved in {path}")


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
    app.command("kaggle-credentials")(kaggle_credentials)
    app.add_typer(config_app, name="config")
