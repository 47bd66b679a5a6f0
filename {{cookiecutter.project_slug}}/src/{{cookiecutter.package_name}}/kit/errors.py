"""The kit's one-line errors: a mistake the user can fix, with the exit code the CLI ends with.

Raise a subclass (or `KitError` itself) with a message that names the setting or file and the
fix; `kit.cli.run` prints `error: <message>` and exits with its `exit_code`, no traceback.
"""


class KitError(Exception):
    """A request we can tell is wrong, printed as one line; exit code 2 like a parser error."""

    exit_code = 2


class UsageError(KitError):
    """Settings that cannot work together, found before any work starts."""
