"""The kit's one-line errors: a mistake the user can fix, with the exit code the CLI ends with.

Raise a subclass (or `KitError` itself) with a message that names the setting or file and the
fix; `kit.cli.run` prints `error: <message>` and exits with its `exit_code`, no traceback.
"""

import argparse
import sys
from typing import NoReturn


class KitError(Exception):
    """A request we can tell is wrong, printed as one line; exit code 2 like a parser error."""

    exit_code = 2


class UsageError(KitError):
    """Settings that cannot work together, found before any work starts."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the kit's own commands (`doctor`, `sweep`): a mistake is one line and exit 2,
    like LightningCLI's (`kit.console.ConciseParser`), not the usage block first."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}; every option: {self.prog} --help\n")
        sys.exit(2)
