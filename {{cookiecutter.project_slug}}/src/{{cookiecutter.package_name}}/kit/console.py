"""What the console shows: only lines a user can act on.

Two jobs: silence the libraries' messages that no setting of this project can change (each
filter names its one message and its one source, never a whole category), and keep the
parser's mistakes short (the error, one usage line, a pointer to `--help`) instead of the
80-line usage block jsonargparse prints first.
"""

import logging
import os
import sys
import warnings
from typing import NoReturn

from lightning.pytorch.cli import LightningArgumentParser

# (message regex, module regex of the line that warns): why each cannot be acted on.
NOT_ACTIONABLE = (
    # torchdata (in maintenance) calls torch.set_vital, which torch 2.13 deprecates, whenever a
    # StatefulDataLoader starts iterating; a user cannot avoid it, and a newer torchdata will.
    (r"'set_vital' is deprecated", r"torchdata\."),
    # Lightning 2.6's own pytree helper uses a class that torch 2.13 deprecates.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\.pytorch\.utilities\._pytree"),
    # `test --ckpt_path=...` without the checkpoint callbacks that `fit` used: only the kit's own
    # best/last checkpoints, whose state evaluation never needs. Any other callback still warns.
    (
        r"Be aware that when using `ckpt_path`, .* Please add the following callbacks: "
        r"\[(\"(BestCheckpoint|LastCheckpoint)\{[^\"]*\}\"(, )?)+\]\.?$",
        r"lightning\.pytorch\.trainer\.call",
    ),
    # Every resume into a run's own `checkpoints/` (the kit gives each new run a folder of its
    # own, so that folder holds files only when a run resumes into it).
    (r"Checkpoint directory .+[/\\]checkpoints exists and is not empty\.$", r"lightning\.pytorch\.callbacks"),
)
# Lightning's advertisements for its cloud services (litlogger, litmodels), logged as info.
ADVERTISEMENT = "💡 Tip:"


class _NoAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVERTISEMENT)


def quiet_known_noise() -> None:
    """Install the filters above (idempotent: warnings and logging dedupe them)."""
    for message, module in NOT_ACTIONABLE:
        warnings.filterwarnings("ignore", message=message, module=module)
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(existing, _NoAdvertisements) for existing in logger.filters):
        logger.addFilter(_NoAdvertisements())


class ConciseParser(LightningArgumentParser):
    """LightningCLI's parser, whose mistakes end in a few lines and exit code 2.

    jsonargparse prints the whole usage (every flag of the model, the data and the Trainer)
    before its error; here the error comes first, then one usage line and where to read more.
    Nested parsers that try alternatives raise instead of exiting, and JSONARGPARSE_DEBUG
    keeps jsonargparse's own behaviour: both go to the parent class.
    """

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        program = parser.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {message.strip()}\n")
        sys.stderr.write(f"usage: {program} [options]; every option: {program} --help\n")
        sys.exit(2)
