"""The one exception a CLI command raises for a problem the user can fix: one line, exit 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class CliError(Exception):
    pass


@contextmanager
def operator_errors() -> Iterator[None]:
    """Around a command that opens the server's own data (serve, migrate, a token for a user):
    a secret-key or weak-admin-token problem is the operator's to fix, in one line naming the
    setting, not a value.

    Imported here, not at the top: the CLI loads no server module until a command needs one.
    """
    from orchestrator.auth import WeakAdminToken
    from orchestrator.secret_box import SecretBoxError

    try:
        yield
    except (SecretBoxError, WeakAdminToken) as exc:
        raise CliError(f"baton: {exc}") from None
