"""The command line: `python main.py fit|validate|test|predict`, with LightningCLI.

Every constructor argument of the model, its network, the DataModule and the Trainer is a flag
(`--model.network.dropout=0.1`, `--data.batch_size=128`, `--trainer.devices=4`) and a YAML key;
the optimizer and scheduler are Lightning's `--optimizer`/`--lr_scheduler`. The machinery
(checkpoints, exact resume, batch-size tuning, hardware checks) comes from `kit.cli.KitCLI`.
"""

from collections.abc import Sequence
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from .data import DigitsDataModule
from .kit.cli import KitCLI, run
from .model import Classifier
from .sources import DataSourceError

# Read by `python main.py` and by `cli_main()` from Python alike, so both give the same run.
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


class ProjectCLI(KitCLI):
    """The kit's LightningCLI for `Classifier` on `DigitsDataModule`."""

    def __init__(self, default_config_files: Sequence[Path] = (), **kwargs: object) -> None:
        super().__init__(Classifier, DigitsDataModule, default_config_files, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        # The model and its network take these from the data, so they never disagree.
        for key in ("image_shape", "num_classes"):
            parser.link_arguments(f"data.{key}", f"model.{key}", apply_on="instantiate")
            parser.link_arguments(f"data.{key}", f"model.network.init_args.{key}", apply_on="instantiate")


def cli_main(args: Sequence[str] | None = None) -> KitCLI:
    """`python main.py ARGS` from Python: `cli_main(["fit", "--trainer.max_epochs=1"])`."""
    defaults = [DEFAULT_CONFIG] if DEFAULT_CONFIG.is_file() else []
    return run(ProjectCLI, args, defaults, user_errors=(DataSourceError,))
