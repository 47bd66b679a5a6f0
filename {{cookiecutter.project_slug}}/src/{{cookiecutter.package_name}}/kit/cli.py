"""LightningCLI with the kit's defaults, for any LightningModule and LightningDataModule.

Lightning's own flags keep their documented meaning (`--optimizer`, `--lr_scheduler`,
`--trainer.*`, `PL_*` variables, several `-c` files); what this adds is additive: checkpoints
(`--checkpoint.*`, `--last_checkpoint.*`), exact resume and clean stops in `fit`, batch-size
tuning (`--data.batch_size=auto`, `--tuner.*`), `--ckpt_path=best|last` across runs, hardware
checks before anything starts, and one line with exit code 2 for mistakes a user can fix.
"""

import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeUnion
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CyclicLR, OneCycleLR, ReduceLROnPlateau

from . import hardware, launcher
from .callbacks import (
    BestCheckpoint,
    ExactResume,
    GracefulInterrupt,
    LastCheckpoint,
    NonFiniteLossError,
    PredictionWriter,
    StopOnNonFiniteLoss,
)
from .checkpoints import CheckpointNotFoundError, find_checkpoint, next_version, run_version
from .tuning import BatchSizeTuner

SUBCOMMANDS = ("fit", "validate", "test", "predict")
EPILOG = "Check this machine's torch, GPUs and driver: python main.py doctor"
# Schedulers whose own docs say to step them after every batch, not every epoch.
PER_STEP_SCHEDULERS = (OneCycleLR, CyclicLR)


class UsageError(Exception):
    """A request we can tell is wrong before any work starts; printed as one line."""


class KitCLI(LightningCLI):
    """LightningCLI with checkpoints, exact resume and the checks above; subclass it per project."""

    def __init__(
        self,
        model_class: type[L.LightningModule],
        datamodule_class: type[L.LightningDataModule],
        default_config_files: Sequence[Path] = (),
        **kwargs: Any,
    ) -> None:
        # default_env: PL_FIT__TRAINER__MAX_EPOCHS=1 and friends, as in Lightning's docs (the
        # main parser reads the environment too, so it is on at both levels).
        defaults = {"default_config_files": [str(path) for path in default_config_files], "default_env": True}
        kwargs.setdefault(
            "parser_kwargs",
            {"epilog": EPILOG, "default_env": True, **{name: defaults for name in SUBCOMMANDS}},
        )
        # A rerun into an existing run folder (e.g. a resume) rewrites its config.yaml.
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(model_class, datamodule_class, **kwargs)

    @staticmethod
    def configure_optimizers(
        lightning_module: L.LightningModule,
        optimizer: Optimizer,
        lr_scheduler: LRSchedulerTypeUnion | None = None,
    ) -> Any:
        """Wire `--optimizer` and `--lr_scheduler` the way each scheduler expects to be stepped.

        Lightning's default steps every scheduler once per epoch; OneCycleLR and CyclicLR are
        stepped per batch, and ReduceLROnPlateau watches the metric named by its own `monitor`.
        """
        if lr_scheduler is None:
            return optimizer
        scheduler: dict[str, Any] = {"scheduler": lr_scheduler}
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            monitor = getattr(lr_scheduler, "monitor", None)
            if monitor is None:
                raise UsageError(
                    "ReduceLROnPlateau needs a metric to watch: use Lightning's version, "
                    "--lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val/loss (mode min) "
                    "or --lr_scheduler.monitor=val/acc --lr_scheduler.mode=max."
                )
            scheduler["monitor"] = monitor
        if isinstance(lr_scheduler, PER_STEP_SCHEDULERS):
            scheduler["interval"] = "step"
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Settings of the callbacks this CLI adds itself (`subcommand_callbacks`), as flags and
        # YAML keys: --checkpoint.monitor, --last_checkpoint.every_n_train_steps, --tuner.*.
        parser.add_class_arguments(BestCheckpoint, "checkpoint", instantiate=False)
        parser.add_class_arguments(LastCheckpoint, "last_checkpoint", instantiate=False)
        parser.add_class_arguments(BatchSizeTuner, "tuner", instantiate=False)  # --data.batch_size=auto

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        launch = launcher.detect_launch()
        if launch is not None:  # started by torchrun: join its processes into one run
            rank_zero_info(launcher.match_launch(config.trainer, launch))
        hardware.check_request(config.trainer.accelerator, config.trainer.devices)
        if config.get("ckpt_path") in ("best", "last"):
            config.ckpt_path = str(self._find_checkpoint(config, config.ckpt_path))
        share_one_version(config.trainer)
        if self.subcommand == "fit":
            # jsonargparse keeps the settings a new class shares with the old one (--optimizer=Adam
            # after AdamW keeps its weight_decay): show what will actually be built.
            described = [describe(config.get(key)) for key in ("optimizer", "lr_scheduler")]
            rank_zero_info("Optimizer: {}; LR scheduler: {}".format(*described))
        elif self.subcommand in ("validate", "test", "predict") and config.get("ckpt_path") is None:
            rank_zero_warn(
                f"`{self.subcommand}` without --ckpt_path runs the model's initial, untrained weights. "
                "Pass --ckpt_path=best, --ckpt_path=last or a checkpoint file to use trained ones."
            )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config_init[self.subcommand]
        callbacks = [*(config.trainer.get("callbacks") or []), *self.subcommand_callbacks(config)]
        trainer = super().instantiate_trainer(callbacks=callbacks, **kwargs)
        hardware.use_tensor_cores(trainer.accelerator)
        return trainer

    def subcommand_callbacks(self, config: Any) -> list[Callback]:
        """The callbacks this subcommand needs besides the config's own, and nothing more.

        Lightning calls every callback at every hook of every step, needed or not (about 5 us
        each on a CPU), so the fit-only ones stay out of validate/test/predict and the other way
        round. `--trainer.enable_checkpointing=false` is honoured by adding no checkpoints.
        """
        callbacks: list[Callback] = []
        if self.subcommand == "fit":  # exact resume, clean stops, a clear stop on NaN loss
            callbacks += [ExactResume(), GracefulInterrupt(), StopOnNonFiniteLoss()]
            if config.trainer.get("enable_checkpointing") is not False:
                callbacks += [BestCheckpoint(**config.checkpoint), LastCheckpoint(**config.last_checkpoint)]
            if self.datamodule.batch_size == "auto" or config.tuner.scale_lr != "none":
                callbacks.append(BatchSizeTuner(**config.tuner))
        if self.subcommand == "predict":
            callbacks.append(PredictionWriter())  # predictions.csv
        if config.trainer.get("enable_progress_bar") is not False and not any(
            isinstance(callback, ProgressBar) for callback in config.trainer.get("callbacks") or []
        ):
            # Lightning's default bar (Rich, when installed) redraws 100 times a second from a
            # second thread: in a terminal that slows a small model's steps by a third.
            callbacks.append(TQDMProgressBar(refresh_rate=10))
        return callbacks

    def _find_checkpoint(self, config: Any, which: str) -> Path:
        """Resolve `best`/`last` against every earlier run, not only the current one."""
        loggers = logger_settings(config.trainer, spell_out_default=True)
        if not loggers:
            raise UsageError(
                f"--ckpt_path={which} looks in the logger's run folders, but the logger is off or has none. "
                "Pass a checkpoint file instead: --ckpt_path=PATH."
            )
        try:
            checkpoint = find_checkpoint(runs_folder(loggers[0]), which)
        except CheckpointNotFoundError as error:
            raise UsageError(str(error)) from None
        if self.subcommand == "fit" and all(logger.get("version") is None for logger in loggers):
            # Resume into the same run folder so TensorBoard shows one continuous run.
            for logger in loggers:
                logger.version = run_version(checkpoint)
        print(f"Using {which} checkpoint: {checkpoint}")
        return checkpoint


def logger_settings(trainer: Any, spell_out_default: bool = False) -> list[Any]:
    """The init_args of each configured logger that writes `version_N` run folders.

    With `spell_out_default`, Lightning's default logger (a TensorBoardLogger writing to
    `<default_root_dir>/lightning_logs`) is written into the config first, so that a resumed
    run can name the version folder it continues.
    """
    if spell_out_default and trainer.get("logger") in (None, True):
        trainer.logger = Namespace(
            class_path="lightning.pytorch.loggers.TensorBoardLogger",
            init_args=Namespace(save_dir=trainer.default_root_dir or ".", name="lightning_logs"),
        )
    loggers = trainer.get("logger")
    loggers = loggers if isinstance(loggers, list) else [loggers]
    return [
        logger.init_args
        for logger in loggers
        if isinstance(logger, Namespace) and "save_dir" in (logger.get("init_args") or Namespace())
    ]


def runs_folder(logger: Any) -> Path:
    return Path(logger.save_dir) / (logger.get("name") or "")


def share_one_version(trainer: Any) -> None:
    """Several loggers (TensorBoard and CSV, say) write one run into one `version_N` folder.

    Left alone, each picks its own next free number, and one run lands in two folders.
    """
    loggers = logger_settings(trainer)
    if len(loggers) > 1 and all(logger.get("version") is None for logger in loggers):
        version = max(next_version(runs_folder(logger)) for logger in loggers)
        for logger in loggers:
            logger.version = version


def describe(spec: Any) -> str:
    """`Name(setting=value, ...)` for a class_path/init_args spec, with what differs from defaults."""
    if spec is None:
        return "none"
    module_name, _, class_name = spec.class_path.rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module_name), class_name)).parameters
    defaults = {name: parameter.default for name, parameter in parameters.items()}
    settings = dict(spec.init_args or {}).items()

    def same(value: Any, default: Any) -> bool:
        return (tuple(value) if isinstance(value, list) else value) == default

    changed = ", ".join(f"{name}={value}" for name, value in settings if not same(value, defaults.get(name)))
    return f"{class_name}({changed})"


def run(
    cli_class: Callable[..., KitCLI],
    args: Sequence[str] | None = None,
    default_config_files: Sequence[Path] = (),
    user_errors: tuple[type[Exception], ...] = (),
) -> KitCLI:
    """Run `cli_class`; mistakes we can name (and `user_errors`) end as one line, exit code 2."""
    one_line_errors: tuple[type[Exception], ...] = (
        UsageError,
        hardware.HardwareError,
        launcher.LaunchMismatchError,
        *user_errors,
    )
    try:
        return cli_class(default_config_files=default_config_files, args=args)
    except one_line_errors as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
