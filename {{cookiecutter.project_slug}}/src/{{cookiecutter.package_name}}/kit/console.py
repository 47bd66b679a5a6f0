"""What the console shows: only lines a user can act on.

Two jobs: silence the libraries' messages that no setting of this project can change (each
filter names its one message and its one source, never a whole category), and keep the
parser's mistakes short (the error, one usage line, a pointer to `--help`) instead of the
80-line usage block jsonargparse prints first.
"""

import logging
import os
import re
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
    # `test --ckpt_path=...` without the callbacks that `fit` used: only the kit's fit guard and
    # best/last checkpoints, whose state evaluation never needs. Any other callback still warns.
    (
        r"Be aware that when using `ckpt_path`, .* Please add the following callbacks: "
        r"\[((\"(BestCheckpoint|LastCheckpoint)\{[^\"]*\}\"|'FitGuard')(, )?)+\]\.?$",
        r"lightning\.pytorch\.trainer\.call",
    ),
    # Every resume into a run's own `checkpoints/` (the kit gives each new run a folder of its
    # own, so that folder holds files only when a run resumes into it).
    (r"Checkpoint directory .+[/\\]checkpoints exists and is not empty\.$", r"lightning\.pytorch\.callbacks"),
)
# Log lines no setting changes, by the logger that writes them: (logger, the lines' start).
NOT_ACTIONABLE_LOGS = (
    # Lightning's advertisements for its cloud services (litlogger, litmodels), logged as info.
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip:"),
    # MLflow's first run on a new local store: the kit chose that store (trackers.py).
    ("mlflow.store.db.utils", "Creating initial MLflow database tables"),
    # Ctrl-C or SIGTERM stopping `serve`: the kit says "Stopped serving (SIGINT)." itself.
    ("litserve.server", "KeyboardInterrupt received"),
)


class _NotActionable(logging.Filter):
    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


def quiet_known_noise() -> None:
    """Install the filters above (idempotent: warnings dedupe them, and each logger gets one)."""
    for message, module in NOT_ACTIONABLE:
        warnings.filterwarnings("ignore", message=message, module=module)
    for name, start in NOT_ACTIONABLE_LOGS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, _NotActionable) for existing in logger.filters):
            logger.addFilter(_NotActionable(start))


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
        sys.stderr.write(f"error: {one_line_value_error(message.strip())}\n")
        sys.stderr.write(f"usage: {program} [options]; every option: {program} --help\n")
        sys.exit(2)


def one_line_value_error(message: str) -> str:
    """jsonargparse's explanation of a value that no accepted type takes (9 to 12 lines, a line
    per type tried) as one line: the flag or variable, the value, why, and what it accepts.
    Any other message is kept as it is."""
    match = re.match(r'Parser key "([^"]+)":(.*)', message, re.S)
    given = re.findall(r"^\s*Given value: (.*)$", message, re.M)
    subtypes = re.search(r"^\s*Subtypes: \[(.*)\]$", message, re.M)
    if match is None or not given or subtypes is None:
        return message
    key, value = match.group(1), given[-1].strip()
    accepted = [item for subtype in split_top_level(subtypes.group(1)) for item in readable_type(subtype)]
    reasons = re.findall(r"Problem with given class_path '[^']*':\s*\n\s*(.+)", message)
    if not reasons and ("Expected a dot import path" in message or "either not accessible" in message):
        reasons = ["no such class (give its import path, e.g. my_package.MyClass)"]
    why = f"{reasons[0].strip()}; " if reasons else ""
    *others, last = dict.fromkeys(accepted)
    expected = f"{', '.join(others)} or {last}" if others else last
    return f"{setting_source(key, value)}={value}: {why}expected {expected}"


def split_top_level(text: str) -> list[str]:
    """`a, b[c, d], e` -> ['a', 'b[c, d]', 'e']."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


def readable_type(subtype: str) -> list[str]:
    """`<class 'int'>` -> [int], `<class 'NoneType'>` -> [null], `typing.Literal['a', 1]` -> [a, 1],
    a class -> [an Optimizer subclass]."""
    literal = re.fullmatch(r"typing\.Literal\[(.*)\]", subtype)
    if literal:
        return [value.strip(" '\"") for value in split_top_level(literal.group(1))]
    name = re.sub(r"^<class '(.*)'>$", r"\1", subtype).rsplit(".", 1)[-1]
    if name == "NoneType":
        return ["null"]
    if name in ("int", "float", "str", "bool"):
        return [name]
    return [f"{'an' if name[0] in 'AEIOU' else 'a'} {name} subclass"]


def setting_source(key: str, value: str) -> str:
    """`--key`, or the environment variable that gave the value (PL_FIT__TRAINER__MAX_EPOCHS)."""
    suffix = key.upper().replace(".", "__")
    for name, set_to in os.environ.items():
        if name.startswith("PL_") and name.endswith(suffix) and set_to == value:
            return name
    return f"--{key}"
