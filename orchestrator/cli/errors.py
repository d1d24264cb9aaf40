"""The one exception a CLI command raises for a problem the user can fix: one line, exit 1."""


class CliError(Exception):
    pass
