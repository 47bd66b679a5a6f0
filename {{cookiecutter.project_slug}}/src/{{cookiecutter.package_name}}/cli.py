{%- set datamodule, model = ("DiabetesDataModule", "Regressor") if cookiecutter.task == "tabular_regression" else ("DigitsDataModule", "Classifier") -%}
"""The command line, `python main.py fit|validate|test|predict|export|serve`: the kit's LightningCLI.

Every constructor argument of the model, its network, the DataModule and the Trainer is a flag
(`--model.network.dropout=0.1`, `--data.batch_size=128`, `--trainer.devices=4`) and a YAML key.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .data import {{ datamodule }}
from .kit.cli import KitCLI, run
from .model import {{ model }}

# Read by `python main.py` and by `cli_main()` from Python alike, so both give the same run.
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


class ProjectCLI(KitCLI):
    """The kit's LightningCLI for `{{ model }}` on `{{ datamodule }}`."""

    def __init__(self, default_config_files: Sequence[Path] = (), **kwargs: Any) -> None:
        # subclass_mode: `--model=my_package.MyModule --data=my_package.MyData` (or class_path in a
        # config) run another LightningModule and DataModule; these two are the defaults.
        super().__init__({{ model }}, {{ datamodule }}, default_config_files, subclass_mode=True, **kwargs)


def cli_main(args: Sequence[str] | None = None) -> KitCLI:
    """`python main.py ARGS` from Python: `cli_main(["fit", "--trainer.max_epochs=1"])`."""
    return run(ProjectCLI, args, [DEFAULT_CONFIG] if DEFAULT_CONFIG.is_file() else [])
