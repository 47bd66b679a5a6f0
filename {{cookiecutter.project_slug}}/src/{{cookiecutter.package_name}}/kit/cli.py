"""LightningCLI with the kit's defaults, for any LightningModule and LightningDataModule.

Lightning's own flags keep their documented meaning (`--optimizer`, `--lr_scheduler`,
`--trainer.*`, `PL_*` variables, several `-c` files); what this adds is additive: checkpoints
(`--checkpoint.*`, `--last_checkpoint.*`), exact resume and clean stops in `fit`, batch-size
tuning (`--data.batch_size=auto`, `--tuner.*`), `--ckpt_path=best|last` across runs, hardware
checks before anything starts, the `export` and `serve` subcommands (`trainer.KitTrainer`), and
one line with exit code 2 for mistakes a user can fix.
"""

import errno
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import (
    LightningArgumentParser,
    LightningCLI,
    LRSchedulerTypeUnion,
    SaveConfigCallback,
)
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CyclicLR, OneCycleLR, ReduceLROnPlateau

from . import data_checks, hardware, launcher, resume, trackers
from .callbacks import (
    BestCheckpoint,
    ExactResume,
    GracefulInterrupt,
    LastCheckpoint,
    NonFiniteLossError,
    PredictionWriter,
    StopOnNonFiniteLoss,
    StopRequested,
)
from .checkpoints import CheckpointNotFoundError, find_checkpoint, next_version, run_version
from .compiling import CompileModel
from .datamodule import KitDataModule, tunes_batch_size
from .export import ExportError, check_format
from .trainer import KitTrainer
from .tuning import BatchSizeTuner

SUBCOMMANDS = ("fit", "validate", "test", "predict", "export", "serve")
# A run stopped by Ctrl-C or SIGTERM (preemption) exits with 128 + SIGTERM, as if the signal had
# ended it: `fit && test` does not test a half-trained model, and a scheduler can tell a
# preempted job from a finished one.
EXIT_STOPPED = 143
# Write errors a user fixes by freeing space or choosing another folder.
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
# Always on, and idle where they have nothing to do (the first three act in fit only, the writer
# in predict only): exact resume, clean stops on Ctrl-C/SIGTERM, a clear stop on a NaN loss,
# predictions.csv.
KIT_CALLBACKS = (ExactResume, GracefulInterrupt, StopOnNonFiniteLoss, PredictionWriter)
EPILOG = "Check this machine's torch, GPUs and driver: python main.py doctor"
# Schedulers whose own docs say to step them after every batch, not every epoch.
PER_STEP_SCHEDULERS = (OneCycleLR, CyclicLR)


class UsageError(Exception):
    """A request we can tell is wrong before any work starts; printed as one line."""


class KitCLI(LightningCLI):
    """LightningCLI with checkpoints, exact resume and the checks above; subclass it per project."""

    # DataModule/model settings a resumed run may change: how batches reach the device, not what
    # they hold or in which order. A new batch size would skip a different number of samples,
    # and a loader's saved position only fits a loader with as many worker processes.
    resume_may_change = frozenset({"pin_memory", "prefetch_factor"})
    # Where fit's checkpoints go when the first logger has no run folder (else None: its folder),
    # and the run folder a resumed fit continues.
    checkpoint_dir: Path | None = None
    resume_version: int | None = None

    def __init__(
        self,
        model_class: type[L.LightningModule],
        datamodule_class: type[L.LightningDataModule],
        default_config_files: Sequence[Path] = (),
        **kwargs: Any,
    ) -> None:
        # default_env: PL_FIT__TRAINER__MAX_EPOCHS=1 and friends, as in Lightning's docs (the
        # main parser reads the environment too, so it is on at both levels).
        # allow_abbrev=False: a misspelt --trainer.max_epoch is an error, not a guess.
        defaults = {
            "default_config_files": [str(path) for path in default_config_files],
            "default_env": True,
            "allow_abbrev": False,
        }
        kwargs.setdefault(
            "parser_kwargs",
            {
                "epilog": EPILOG,
                "default_env": True,
                "allow_abbrev": False,
                **{name: defaults for name in SUBCOMMANDS},
            },
        )
        # A rerun into an existing run folder (e.g. a resume) rewrites its config.yaml.
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("save_config_callback", RunConfig)
        # Lightning's Trainer plus the `export` and `serve` subcommands (kit/trainer.py).
        kwargs.setdefault("trainer_class", KitTrainer)
        super().__init__(model_class, datamodule_class, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's four, plus `export` and `serve` (KitTrainer's methods of those names)."""
        shipping = {"export": {"model", "datamodule"}, "serve": {"model", "datamodule"}}
        return {**LightningCLI.subcommands(), **shipping}

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
        # The kit's always-on callbacks are ordinary entries of trainer.callbacks, so
        # --print_config lists them and --trainer.callbacks replaces or (+=) extends them as
        # Lightning documents. A config file that sets trainer.callbacks lists them itself.
        parser.set_defaults({"trainer.callbacks": [{"class_path": class_path(c)} for c in KIT_CALLBACKS]})
        # Callbacks that a Trainer flag switches on or off, as config groups (flags and YAML keys):
        # --checkpoint.* and --last_checkpoint.* (enable_checkpointing), --tuner.*
        # (--data.batch_size=auto), --progress_bar.* (enable_progress_bar); and --compile.*.
        parser.add_class_arguments(BestCheckpoint, "checkpoint", instantiate=False)
        parser.add_class_arguments(LastCheckpoint, "last_checkpoint", instantiate=False)
        parser.add_class_arguments(BatchSizeTuner, "tuner", instantiate=False)
        parser.add_class_arguments(TQDMProgressBar, "progress_bar", instantiate=False)
        parser.add_class_arguments(CompileModel, "compile", instantiate=False)  # --compile.enabled=true
        # Lightning's default bar (Rich, when installed) redraws 100 times a second from a second
        # thread: in a terminal that slows a small model's steps by a third.
        parser.set_defaults({"progress_bar.refresh_rate": 10})
        link_model_to_data(parser, self.model_class, self.datamodule_class)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Resolve `--ckpt_path=best|last` and check the file before Lightning reads it.

        LightningCLI then builds the model with the hyperparameters stored in the checkpoint
        (for a file path; here also for best and last), so `test --ckpt_path=best` rebuilds the
        network it trained. A resumed `fit` must not contradict them: a flag that asks for other
        model settings, or data settings unlike the checkpoint's, is refused rather than ignored.
        """
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else None
        if config is None or not config.get("ckpt_path"):
            return
        if config.ckpt_path in ("best", "last"):
            config.ckpt_path = str(self._find_checkpoint(config, config.ckpt_path))
        if not resume.is_local(config.ckpt_path):
            return
        checkpoint = Path(config.ckpt_path)
        resume.check_whole(checkpoint)
        if subcommand == "fit":
            baseline = parser.parse_args([subcommand])[subcommand]  # what no flag at all would give
            model = changed(config.get("model"), baseline.get("model"))
            data = (config.get("data") or Namespace()).as_dict()
            resume.check_settings_agree(
                checkpoint, model, data.get("init_args", data), self.resume_may_change
            )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        launch = launcher.detect_launch()
        if launch is not None:  # started by torchrun: join its processes into one run
            rank_zero_info(launcher.match_launch(config.trainer, launch))
        hardware.check_request(config.trainer.accelerator, config.trainer.devices)
        trackers.check_installed(logger_specs(config.trainer))
        fill_logger_defaults(config.trainer)
        if config.get("ckpt_path") and resume.is_local(config.ckpt_path):
            if self.subcommand == "fit":
                self._continue_run(config, Path(config.ckpt_path))
            else:  # e.g. `test --ckpt_path=best`: its metrics join the trained run's tracker run
                self._continue_tracker_runs(config, Path(config.ckpt_path))
        share_one_version(config.trainer)
        if self.subcommand == "fit":
            self._pin_checkpoint_folder(config)
        if self.subcommand == "fit":
            # jsonargparse keeps the settings a new class shares with the old one (--optimizer=Adam
            # after AdamW keeps its weight_decay): show what will actually be built.
            described = [describe(config.get(key)) for key in ("optimizer", "lr_scheduler")]
            rank_zero_info("Optimizer: {}; LR scheduler: {}".format(*described))
        elif self.subcommand == "export":
            check_format(config.format)
            if config.get("ckpt_path") is None:
                raise UsageError("export needs trained weights: --ckpt_path=best, --ckpt_path=last or a file")
        elif self.subcommand == "serve" and (not config.get("ckpt_path")) == (config.get("exported") is None):
            raise UsageError("serve needs one model: --ckpt_path=best|last|PATH or --exported=FILE")
        elif self.subcommand in ("validate", "test", "predict") and config.get("ckpt_path") is None:
            rank_zero_warn(
                f"`{self.subcommand}` without --ckpt_path runs the model's initial, untrained weights. "
                "Pass --ckpt_path=best, --ckpt_path=last or a checkpoint file to use trained ones."
            )

    def instantiate_classes(self) -> None:
        # A model's or DataModule's ValueError on its settings (batch_size=0, ...) and the
        # Trainer's refusals (an unknown accelerator, FSDP without a GPU) are messages for the
        # user, not tracebacks.
        try:
            super().instantiate_classes()
            if self.subcommand != "fit" and isinstance(self.datamodule, KitDataModule):
                self.datamodule.fixed_batch_size()  # refuses batch_size=auto, which fit alone resolves
        except ValueError as error:
            raise UsageError(one_line(error)) from error

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config_init[self.subcommand]
        callbacks = [*(config.trainer.get("callbacks") or []), *self.subcommand_callbacks(config)]
        trainer = super().instantiate_trainer(callbacks=callbacks, **kwargs)
        hardware.use_tensor_cores(trainer.accelerator)
        return trainer

    def subcommand_callbacks(self, config: Any) -> list[Callback]:
        """The config groups' callbacks this run asks for: each only when its Trainer flag is on."""
        callbacks: list[Callback] = []
        if self.subcommand == "fit":
            if config.trainer.get("enable_checkpointing") is not False:
                checkpoints: list[ModelCheckpoint] = [
                    BestCheckpoint(**config.checkpoint),
                    LastCheckpoint(**config.last_checkpoint),
                ]
                for checkpoint in checkpoints:
                    if self.checkpoint_dir is not None:  # else: the first logger's run folder
                        checkpoint.dirpath = str(self.checkpoint_dir.resolve())
                callbacks += checkpoints
            if tunes_batch_size(self.datamodule) or config.tuner.scale_lr != "none":
                callbacks.append(BatchSizeTuner(**config.tuner))
        if config.compile.enabled:
            callbacks.append(CompileModel(**config.compile))
        if config.trainer.get("enable_progress_bar") is not False and not any(
            isinstance(callback, ProgressBar) for callback in config.trainer.get("callbacks") or []
        ):
            callbacks.append(TQDMProgressBar(**config.progress_bar))
        return callbacks

    def _find_checkpoint(self, config: Any, which: str) -> Path:
        """Resolve `best`/`last` against every earlier run, not only the current one."""
        fill_logger_defaults(config.trainer)
        try:
            checkpoint = find_checkpoint(checkpoint_runs(config.trainer), which)
        except CheckpointNotFoundError as error:
            raise UsageError(str(error)) from None
        print(f"Using {which} checkpoint: {checkpoint}")
        return checkpoint

    def _continue_run(self, config: Any, checkpoint: Path) -> None:
        """`fit --ckpt_path=best|last|PATH` continues that run in its own folder.

        A checkpoint inside one of the logger's `version_N` folders resumes into that folder, so
        TensorBoard shows one continuous run, and locks it against a second resume at once.
        """
        loggers = logger_settings(config.trainer, spell_out_default=True)
        run_dir = checkpoint.resolve().parent.parent
        in_a_run = run_dir.parent == checkpoint_runs(config.trainer).resolve()
        if not in_a_run or run_version(checkpoint) is None:
            return
        self.resume_version = run_version(checkpoint)
        if all(logger.get("version") is None for logger in loggers):
            for logger in loggers:
                logger.version = run_version(checkpoint)
            # The saved config.yaml stays a recipe for a fresh run: no version, no checkpoint.
            self.save_config_kwargs["forget_version"] = True
        self._continue_tracker_runs(config, checkpoint)
        if rank_zero_only.rank == 0:
            resume.lock_run_folder(run_dir)

    def _pin_checkpoint_folder(self, config: Any) -> None:
        """Checkpoints go into a `version_N` run folder whichever logger comes first, or none.

        Lightning puts them in the first logger's folder: TensorBoard's and CSV's are run folders;
        a tracker's (MLflow, W&B) is not, and with `--trainer.logger=false` there is none. Then
        they go where `--ckpt_path=best|last` looks: the first run-folder logger's next
        `version_N`, else `<default_root_dir>/lightning_logs/version_N`, as the default logger's.
        """
        specs = logger_specs(config.trainer)
        if config.trainer.get("logger") in (None, True) or (specs and writes_run_folders(specs[0])):
            return
        folders = logger_settings(config.trainer)
        runs = checkpoint_runs(config.trainer)
        version = next((f.version for f in folders if f.get("version") is not None), self.resume_version)
        if version is None:
            version = next_version(runs)
        for folder in folders:
            folder.version = version
        self.checkpoint_dir = runs / f"version_{version}" / "checkpoints"

    def _continue_tracker_runs(self, config: Any, checkpoint: Path) -> None:
        """Trackers (MLflow, W&B) log into the run recorded in the checkpoint's run folder."""
        run_dir = checkpoint.resolve().parent.parent
        if run_version(checkpoint) is not None:
            trackers.continue_runs(run_dir, logger_specs(config.trainer))
            self.save_config_kwargs["forget_version"] = True


class RunConfig(SaveConfigCallback):
    """Saves the run's config.yaml as a recipe: `fit -c config.yaml` trains the run again.

    A resumed run's config would otherwise name the checkpoint it started from and the run
    folder it continues; rerunning it would then restore the finished checkpoint into the old
    folder and train nothing.
    """

    def __init__(self, *args: Any, forget_version: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forget_version = forget_version

    def setup(self, trainer: Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config: Namespace = self.config  # type: ignore[has-type]  # set by SaveConfigCallback
        if stage == "fit" and config.get("ckpt_path"):
            config = config.clone()
            config.ckpt_path = None
            if self.forget_version:
                for logger in logger_settings(config.trainer):
                    logger.version = None
                for spec in logger_specs(config.trainer):  # nor the tracker run it continued
                    for key in ("run_id", "id"):
                        if trackers.tracker_class(spec) is not None and key in spec.init_args:
                            spec.init_args[key] = None
            self.config = config
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Rank 0: the whole config to each tracker (params once, config.yaml as a file), and
        the trackers' run ids into the run folder, for a resumed `fit` or a `test` to continue."""
        tracking = [logger for logger in trainer.loggers if isinstance(logger, trackers.Tracker)]
        if not tracking:
            return
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))  # type: ignore[has-type]
        first = trainer.loggers[0]  # (not trainer.log_dir: it waits for the other ranks)
        run_dir = Path(first.log_dir) if isinstance(first, RUN_FOLDER_LOGGERS) else None
        config_file = run_dir / self.config_filename if run_dir and stage == "fit" else None
        for tracker in tracking:
            tracker.log_config(config, config_file)
        if run_dir is not None and stage == "fit":
            trackers.record_runs(run_dir, tracking)


def changed(settings: Any, baseline: Any) -> dict[str, Any]:
    """The settings (flattened) whose value differs from the baseline's: the ones asked for."""

    def flat(namespace: Any) -> dict[str, Any]:
        values = resume.flatten((namespace or Namespace()).as_dict())
        return {key.removeprefix("init_args."): value for key, value in values.items()}

    ours, base = flat(settings), flat(baseline)
    return {key: value for key, value in ours.items() if key not in base or base[key] != value}


def one_line(error: BaseException) -> str:
    """An exception's message folded onto one line."""
    return " ".join(str(error).split())


def class_path(cls: type) -> str:
    """The dotted path a config file names a class by."""
    return f"{cls.__module__}.{cls.__qualname__}"


# Loggers that write `<save_dir>/<name>/version_N` run folders (checkpoints go into the first's).
RUN_FOLDER_LOGGERS = (TensorBoardLogger, CSVLogger)


def logger_specs(trainer: Any) -> list[Any]:
    """Each configured logger's `class_path`/`init_args` Namespace (none for `logger: false`)."""
    loggers = trainer.get("logger")
    loggers = loggers if isinstance(loggers, list) else [loggers]
    return [logger for logger in loggers if isinstance(logger, Namespace) and logger.get("init_args")]


def fill_logger_defaults(trainer: Any) -> None:
    """The kit's trackers fill in what their config leaves empty (MLflow's local store, under
    `trainer.default_root_dir`), in every process alike."""
    root_dir = Path(trainer.get("default_root_dir") or ".")
    for spec in logger_specs(trainer):
        tracker = trackers.tracker_class(spec)
        if tracker is not None:
            tracker.fill_defaults(spec.init_args, root_dir)


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
    return [spec.init_args for spec in logger_specs(trainer) if writes_run_folders(spec)]


def writes_run_folders(spec: Any) -> bool:
    """Whether a logger spec names a logger that writes `version_N` folders (TensorBoard, CSV)."""
    cls = trackers.logger_class(spec)
    return cls is not None and issubclass(cls, RUN_FOLDER_LOGGERS) and "save_dir" in spec.init_args


def runs_folder(logger: Any) -> Path:
    return Path(logger.save_dir) / (logger.get("name") or "")


def checkpoint_runs(trainer: Any) -> Path:
    """The folder whose `version_N/checkpoints` hold the checkpoints: the first run-folder
    logger's (TensorBoard's, by default), else `<default_root_dir>/lightning_logs`."""
    folders = logger_settings(trainer, spell_out_default=True)
    if folders:
        return runs_folder(folders[0])
    return Path(trainer.get("default_root_dir") or ".") / "lightning_logs"


def share_one_version(trainer: Any) -> None:
    """Several loggers (TensorBoard and CSV, say) write one run into one `version_N` folder.

    Left alone, each picks its own next free number, and one run lands in two folders.
    """
    loggers = logger_settings(trainer)
    if len(loggers) > 1 and all(logger.get("version") is None for logger in loggers):
        version = max(next_version(runs_folder(logger)) for logger in loggers)
        for logger in loggers:
            logger.version = version


def link_model_to_data(parser: LightningArgumentParser, model_class: type, datamodule_class: type) -> None:
    """Pass each of the DataModule's `model_links` (`KitDataModule`) to the model's argument of the
    same name, and to its injected `network`'s, once the DataModule is built."""
    parameters = inspect.signature(model_class).parameters
    for name in datamodule_class.model_links if issubclass(datamodule_class, KitDataModule) else ():
        targets = [f"model.{name}"] if name in parameters else []
        targets += [f"model.network.init_args.{name}"] if "network" in parameters else []
        for target in targets:
            parser.link_arguments(f"data.{name}", target, apply_on="instantiate")


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
        resume.ResumeError,
        data_checks.DataError,
        hardware.HardwareError,
        launcher.LaunchMismatchError,
        ExportError,
        trackers.TrackerError,
        *user_errors,
    )
    try:
        return cli_class(default_config_files=default_config_files, args=args)
    except SIGTERMException as stop:  # Ctrl-C, SIGTERM, SLURM's warning: last.ckpt is saved
        if isinstance(stop, StopRequested) and stop.requeue and rank_zero_only.rank == 0:
            print(launcher.requeue_slurm_job(), file=sys.stderr)
        print(
            f"Stopped before the end (exit code {EXIT_STOPPED}): resume with `fit --ckpt_path=last`.",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_STOPPED) from None
    except one_line_errors as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except MisconfigurationException as error:  # Lightning's own "this setting cannot work"
        print(f"error: {one_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as error:
        if error.errno not in UNWRITABLE:
            raise
        print(
            f"error: cannot write {error.filename or 'a file'}: {error.strerror}. Free some space or "
            "write elsewhere with --trainer.default_root_dir=DIR.",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        resume.release_locks()
