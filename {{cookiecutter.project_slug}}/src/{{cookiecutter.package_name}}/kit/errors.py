"""The kit's one-line errors: a mistake the user can fix, with the exit code the CLI ends with.

Raise a subclass (or `KitError` itself) with a message that names the setting or file and the
fix; `kit.cli.run` prints `error: <message>` and exits with its `exit_code`, no traceback.
"""

import argparse
import sys
from typing import NoReturn

# How a run ends, as its exit code: the one table (a shell reports a death by signal N as 128 + N).
EXIT_USAGE = 2  # a mistake the user can fix, said in one line (as a parser error)
EXIT_INTERRUPTED = 130  # an uncaught Ctrl-C (the second one: abort at once)
# Stopped cleanly by Ctrl-C, SIGTERM (preemption) or SLURM's warning, last.ckpt saved: 128 + SIGTERM,
# as if the signal had ended it, so `fit && test` does not test a half-trained model and a
# scheduler tells a preempted job from a finished one. Resume with `fit --ckpt_path=last`.
EXIT_STOPPED = 143


class KitError(Exception):
    """A request we can tell is wrong, printed as one line; exit code 2 like a parser error."""

    exit_code = EXIT_USAGE


class UsageError(KitError):
    """Settings that cannot work together, found before any work starts."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the kit's own commands (`doctor`, `sweep`): a mistake is one line and exit 2,
    like LightningCLI's (`kit.console.ConciseParser`), not the usage block first."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}; every option: {self.prog} --help\n")
        sys.exit(EXIT_USAGE)
