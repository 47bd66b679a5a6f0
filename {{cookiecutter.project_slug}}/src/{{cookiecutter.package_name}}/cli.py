"""The command line: LightningCLI with this project's defaults.

Every constructor argument of the model, the DataModule and the Trainer becomes a flag
(`--model.dropout=0.1`, `--data.batch_size=128`, `--trainer.devices=4`) and a YAML key.
"""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from . import doctor, hardware, launcher
from .callbacks import (
    BestCheckpoint,
    ExactResume,
    GracefulInterrupt,
    LastCheckpoint,
    NonFiniteLossError,
    PredictionWriter,
    StopOnNonFiniteLoss,
)
from .checkpoints import CheckpointNotFoundError, find_checkpoint, run_version
from .data import DigitsDataModule
from .model import Classifier
from .sources import DataSourceError
from .tuning import BatchSizeTuner

SUBCOMMANDS = ("fit", "validate", "test", "predict")
EPILOG = "Check this machine's torch, GPUs and driver: python main.py doctor"


class UsageError(Exception):
    """A request we can tell is wrong before any work starts; printed as one line."""


class ProjectCLI(LightningCLI):
    """LightningCLI for `Classifier` on `DigitsDataModule`, with checkpoints always on."""

    def __init__(self, default_config_files: Sequence[Path] = (), **kwargs: Any) -> None:
        defaults = {"default_config_files": [str(path) for path in default_config_files]}
        kwargs.setdefault("parser_kwargs", {"epilog": EPILOG, **{name: defaults for name in SUBCOMMANDS}})
        # A rerun into an existing run folder (e.g. a resume) rewrites its config.yaml.
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        # The model takes its optimizer as an argument (model.optimizer), so no extra
        # top-level --optimizer/--lr_scheduler flags that could contradict it.
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(Classifier, DigitsDataModule, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The model takes these from the data, so they are never set twice or disagree.
        parser.link_arguments("data.image_shape", "model.image_shape", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        # Always-on callbacks whose settings stay flags: --checkpoint.monitor, --last_checkpoint.*
        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(BatchSizeTuner, "tuner")  # --data.batch_size=auto, --tuner.*

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        launch = launcher.detect_launch()
        if launch is not None:  # started by torchrun: join its processes into one run
            rank_zero_info(launcher.match_launch(config.trainer, launch))
        hardware.check_request(config.trainer.accelerator, config.trainer.devices)
        if config.get("ckpt_path") in ("best", "last"):
            config.ckpt_path = str(self._find_checkpoint(config, config.ckpt_path))

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer_config = self._get(self.config_init, "trainer")
        callbacks = [*(trainer_config.get("callbacks") or []), *self._always_on_callbacks()]
        if trainer_config.get("enable_progress_bar") is not False and not any(
            isinstance(callback, ProgressBar) for callback in callbacks
        ):
            # Lightning's default bar (Rich, when installed) redraws 100 times a second from a
            # second thread: in a terminal that slows a small model's steps by a third.
            callbacks.append(TQDMProgressBar(refresh_rate=10))
        trainer_config["callbacks"] = callbacks
        for key in self._unused_callback_keys(trainer_config):
            self._parser(self.subcommand).callback_keys.remove(key)
        trainer = super().instantiate_trainer(**kwargs)
        hardware.use_tensor_cores(trainer.accelerator)
        return trainer

    def _always_on_callbacks(self) -> list[Callback]:
        """What this subcommand needs whatever the config says, and nothing more.

        Lightning calls every callback at every hook of every step, needed or not (about 5 us
        each on a CPU), so the fit-only ones stay out of validate/test/predict and the other way round.
        """
        if self.subcommand == "fit":  # exact resume, clean Ctrl-C, a clear stop on NaN loss
            return [ExactResume(), GracefulInterrupt(), StopOnNonFiniteLoss()]
        if self.subcommand == "predict":
            return [PredictionWriter()]  # predictions.csv
        return []

    def _unused_callback_keys(self, trainer_config: dict[str, Any]) -> list[str]:
        """Our flag-configured callbacks (--checkpoint.*, --last_checkpoint.*, --tuner.*) to leave out."""
        unused = []
        if self.subcommand != "fit" or trainer_config.get("enable_checkpointing") is False:
            # Only fit writes checkpoints; and --trainer.enable_checkpointing=false is honoured
            # instead of failing on our always-on checkpoint callbacks.
            unused += ["checkpoint", "last_checkpoint"]
        tuner = self._get(self.config_init, "tuner")
        if self.subcommand != "fit" or (self.datamodule.batch_size != "auto" and tuner.scale_lr == "none"):
            unused.append("tuner")  # nothing to search for or scale
        return unused

    def _find_checkpoint(self, config: Any, which: str) -> Path:
        """Resolve `best`/`last` against every earlier run, not only the current one."""
        logger = config.trainer.get("logger")
        init_args = getattr(logger, "init_args", None)
        if init_args is None or "save_dir" not in init_args:
            raise UsageError(
                f"--ckpt_path={which} looks in the TensorBoard logger's run folders, but no such logger is "
                "configured. Pass a checkpoint file instead: --ckpt_path=PATH."
            )
        runs_dir = Path(init_args.save_dir) / (init_args.get("name") or "")
        try:
            checkpoint = find_checkpoint(runs_dir, which)
        except CheckpointNotFoundError as error:
            raise UsageError(str(error)) from None
        if self.subcommand == "fit" and init_args.get("version") is None:
            # Resume into the same run folder so TensorBoard shows one continuous run.
            init_args.version = run_version(checkpoint)
        print(f"Using {which} checkpoint: {checkpoint}")
        return checkpoint


def cli_main(
    args: Sequence[str] | None = None, default_config_files: Sequence[Path] = ()
) -> ProjectCLI | None:
    """Run the CLI; requests we can check up front fail with one clear line and exit code 2."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["doctor"]:  # not a Lightning subcommand: handled before LightningCLI parses
        raise SystemExit(doctor.main(argv[1:]))
    try:
        return ProjectCLI(default_config_files=default_config_files, args=args)
    except (UsageError, DataSourceError, hardware.HardwareError, launcher.LaunchMismatchError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
