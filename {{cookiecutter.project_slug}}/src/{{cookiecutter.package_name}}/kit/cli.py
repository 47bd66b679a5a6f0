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
import itertools
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import (
    BasePredictionWriter,
    Callback,
    ModelCheckpoint,
    ProgressBar,
    TQDMProgressBar,
)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden

from . import hardware, launcher, resume, trackers
from .callbacks import BestCheckpoint, LastCheckpoint, PredictionWriter
from .checkpoint_io import AtomicCheckpointIO
from .compiling import CompileModel
from .console import ConciseParser, quiet_known_noise
from .datamodule import KitDataModule, tunes_batch_size
from .errors import EXIT_STOPPED, EXIT_USAGE, KitError, UsageError
from .export import check_format
from .files import blocking_file
from .fit_guard import FitGuard, NonFiniteLossError, StopRequested
from .internals import subcommand_defaults
from .optimizers import configure_optimizers, describe
from .profiling import NoProfiler
from .run_folder import RunConfig, RunFolder, class_path
from .trainer import KitTrainer, check_serving
from .tuning import BatchSizeTuner

SUBCOMMANDS = ("fit", "validate", "test", "predict", "export", "serve")
# Write errors a user fixes by freeing space or choosing another folder.
FULL = (errno.ENOSPC, errno.EDQUOT)
UNWRITABLE = (*FULL, errno.EROFS, errno.EACCES, errno.ENOTDIR, errno.EISDIR, errno.EEXIST)
EPILOG = "Check this machine's torch, GPUs and driver: python main.py doctor"


class KitCLI(LightningCLI):
    """LightningCLI with checkpoints, exact resume and the checks above; subclass it per project."""

    # DataModule/model settings a resumed run may change: how batches reach the device, not what
    # they hold or in which order. A new batch size would skip a different number of samples,
    # and a loader's saved position only fits a loader with as many worker processes.
    resume_may_change = frozenset({"pin_memory", "prefetch_factor"})
    config: Namespace  # the parsed settings (LightningCLI sets it; parse_arguments may update it)

    def __init__(
        self,
        model_class: type[L.LightningModule],
        datamodule_class: type[L.LightningDataModule],
        default_config_files: Sequence[Path] = (),
        subclass_mode: bool = False,
        **kwargs: Any,
    ) -> None:
        # subclass_mode: Lightning's subclass mode for both, with these classes as the defaults:
        # `--model=pkg.MyModule --data=pkg.MyData` (or `class_path:` in YAML) choose others.
        self.default_classes = (model_class, datamodule_class)
        self.linked_classes = self.default_classes  # the classes whose model_links are linked
        if subclass_mode:
            kwargs.update(subclass_mode_model=True, subclass_mode_data=True)
            model_class, datamodule_class = L.LightningModule, L.LightningDataModule
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
        quiet_known_noise()  # library messages no setting can change (kit/console.py)
        kwargs.setdefault("parser_class", ConciseParser)  # mistakes in a few lines, not 80
        # The run's version_N folder, checkpoints, lock and tracker runs (kit/run_folder.py);
        # its config.yaml is saved by RunConfig, Lightning's SaveConfigCallback made to write there.
        # (`run()` passes one in, to let go of its lock however the run ends.)
        self.run_folder: RunFolder = kwargs.pop("run_folder", None) or RunFolder()
        self.optimizers_used = ""  # fit's console line: the module's own optimizers, or the config's
        self.best_checkpoint: BestCheckpoint | None = None  # fit's, named when it ends
        self.args_given: Any = None  # the command line (or args), to tell flags from defaults
        kwargs.setdefault("save_config_callback", RunConfig)
        kwargs.setdefault("save_config_kwargs", {"run_folder": self.run_folder})
        # Lightning's Trainer plus the `export` and `serve` subcommands (kit/trainer.py).
        kwargs.setdefault("trainer_class", KitTrainer)
        super().__init__(model_class, datamodule_class, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's four, plus `export` and `serve` (KitTrainer's methods of those names)."""
        shipping = {"export": {"model", "datamodule"}, "serve": {"model", "datamodule"}}
        return {**LightningCLI.subcommands(), **shipping}

    # `--optimizer`/`--lr_scheduler` stepped as each scheduler expects (kit/optimizers.py).
    configure_optimizers = staticmethod(configure_optimizers)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The kit's callbacks, as config groups (flags and YAML keys) rather than entries of
        # trainer.callbacks, which stays the user's list: the fit guard, always in fit
        # (--guard.*, kit/fit_guard.py); those a Trainer flag switches on or off: --checkpoint.*
        # and --last_checkpoint.* (enable_checkpointing), --tuner.* (--data.batch_size=auto),
        # --progress_bar.* (enable_progress_bar); and --compile.*.
        parser.add_class_arguments(FitGuard, "guard", instantiate=False, skip={"saves_last"})
        parser.add_class_arguments(BestCheckpoint, "checkpoint", instantiate=False)
        parser.add_class_arguments(LastCheckpoint, "last_checkpoint", instantiate=False, skip={"best"})
        parser.add_class_arguments(BatchSizeTuner, "tuner", instantiate=False, skip={"record"})
        parser.add_class_arguments(TQDMProgressBar, "progress_bar", instantiate=False)
        parser.add_class_arguments(CompileModel, "compile", instantiate=False)  # --compile.enabled=true
        # Lightning's default bar (Rich, when installed) redraws 100 times a second from a second
        # thread: in a terminal that slows a small model's steps by a third.
        parser.set_defaults({"progress_bar.refresh_rate": 10})
        for key, default in zip(("model", "data"), self.default_classes, strict=True):
            if self.subclass_mode_model if key == "model" else self.subclass_mode_data:
                parser.set_defaults({key: {"class_path": class_path(default)}})
        link_model_to_data(parser, *self.linked_classes, self.subclass_mode_model)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Resolve `--ckpt_path=best|last`, check the file, and take the run's settings from it.

        LightningCLI then builds the model with the hyperparameters stored in the checkpoint
        (for a file path; here also for best and last), so `test --ckpt_path=best` rebuilds the
        network it trained. A resumed `fit` also takes the DataModule's settings from it, where no
        flag asks for others (after `--data.batch_size=auto`, the size found). A flag asking for
        other settings than the checkpoint's is refused rather than silently ignored.
        """
        check_config_files(sys.argv[1:] if args is None else args)
        self.args_given = sys.argv[1:] if args is None else args
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else None
        if config is None:  # LightningCLI(run=False): no checkpoint to read
            self.link_classes(self.chosen_classes(), subcommands=False)
            return
        self.run_folder.read(config.trainer)
        checkpoint = self.checkpoint_to_read(config)
        saved_model, saved_data = resume.saved_settings(checkpoint) if checkpoint else ({}, {})
        adopted_data = {}
        if checkpoint:
            model, data = self.settings_asked("model"), self.settings_asked("data")
            asked_data = data if subcommand == "fit" else None
            resume.check_settings_agree(checkpoint, subcommand, model, asked_data, self.resume_may_change)
            adopted_data = self.data_to_adopt(saved_data, data, subcommand)
        model_class, data_class = self.chosen_classes()
        model_class = trained_class(checkpoint, saved_model, model_class)
        data_class = trained_class(checkpoint, adopted_data, data_class)
        self.link_classes((model_class, data_class), subcommands=True)
        adopted = {"data": adopted_data} if adopted_data else {}
        if self.subclass_mode_model and model_class is not self.chosen_classes()[0]:
            adopted["model"] = {"class_path": class_path(model_class)}  # its settings: Lightning's
        if adopted:
            self.config = self.parser.parse_object({subcommand: adopted}, self.config)

    def settings_asked(self, key: str) -> dict[str, Any]:
        """The model's or the DataModule's settings (flattened) that differ from the defaults, or
        that a flag names: a flag equal to a default still asks for that value."""
        subcommand = self.config.subcommand
        ours = resume.flat_settings(self.config[subcommand].get(key))
        defaults = resume.flat_settings(subcommand_defaults(self, subcommand).get(key))
        args = self.args_given if isinstance(self.args_given, list | tuple) else []
        prefix = f"--{key}."
        named = {
            arg.split("=", 1)[0].removeprefix(prefix).removeprefix("init_args.")
            for arg in args
            if isinstance(arg, str) and arg.startswith(prefix)
        }
        differ = {name for name, value in ours.items() if name not in defaults or defaults[name] != value}
        return {name: value for name, value in ours.items() if name in differ | named}

    def link_classes(self, classes: tuple[type, type], subcommands: bool) -> None:
        """Where another module or DataModule was chosen (subclass mode, or a checkpoint's), build
        the parser again, linking that DataModule's `model_links` to that model."""
        if classes != self.linked_classes:
            self.linked_classes = classes
            self.setup_parser(subcommands, *split_by_subcommand(self.parser_kwargs))

    def checkpoint_to_read(self, config: Namespace) -> Path | None:
        """The local checkpoint `--ckpt_path` names (best and last resolved), checked whole; None
        without one (or for a URL, which Lightning reads itself)."""
        if not config.get("ckpt_path"):
            return None
        which = config.ckpt_path if config.ckpt_path in ("best", "last") else None
        if which is not None:
            config.ckpt_path = str(self.run_folder.find(which))
        if not resume.is_local(config.ckpt_path):
            return None
        resume.check_whole(Path(config.ckpt_path))
        if which is not None and rank_zero_only.rank == 0:
            print(self.run_folder.describe_pick(which, Path(config.ckpt_path)))
        return Path(config.ckpt_path)

    def data_to_adopt(self, saved: dict[str, Any], asked: dict[str, Any], subcommand: str) -> dict[str, Any]:
        """The checkpoint's DataModule settings that the config should take: for a resumed `fit`,
        every one no flag asked for (how data is loaded excepted); for the others, the checkpoint's
        DataModule and its settings when no flag names a DataModule and the config's is another."""
        settings = {key: value for key, value in saved.items() if not key.startswith("_")}
        configured = class_path(self.chosen_classes()[1])
        saved_class = saved.get("_class_path") if "class_path" not in asked else None
        if subcommand == "fit":
            unasked = set(settings) - set(asked) - self.resume_may_change
            settings = {key: settings[key] for key in unasked}
        elif saved_class in (None, configured):
            return {}  # evaluation on the data the config names: its point
        if not self.subclass_mode_data:
            return settings
        if saved_class is None and not settings:
            return {}
        return {"class_path": saved_class or configured, "init_args": settings}

    def chosen_classes(self) -> tuple[type, type]:
        """The model and DataModule classes the parsed config names (their defaults outside subclass mode)."""
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else self.config
        return (
            chosen_class(config.get("model"), self.default_classes[0]),
            chosen_class(config.get("data"), self.default_classes[1]),
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        launch = launcher.detect_launch()
        if launch is not None:  # started by torchrun: join its processes into one run
            rank_zero_info(launcher.match_launch(config.trainer, launch))
        hardware.check_request(config.trainer.accelerator, config.trainer.devices)
        trackers.check_installed(self.run_folder.specs)
        if config.get("ckpt_path") and resume.is_local(config.ckpt_path):
            # fit continues the checkpoint's run folder; e.g. `test --ckpt_path=best` logs into
            # the trained run's tracker runs.
            self.run_folder.continue_run(Path(config.ckpt_path), resume=self.subcommand == "fit")
        # config.yaml: the settings as asked; the loggers are built with the run folder's.
        self.run_folder.recipe = config.clone()
        if self.subcommand == "fit":
            self.run_folder.recipe.ckpt_path = None  # a recipe trains from scratch
        if config.trainer.get("logger") is not False:
            self.run_folder.configure_loggers(config.trainer)
        if self.subcommand == "fit":
            self.optimizers_used = self.choose_optimizers(config)  # said once the model is built
        else:  # only fit optimizes: no optimizer to build, and the module's own stays as it is
            self.auto_configure_optimizers = False
        if self.subcommand == "export":
            check_format(config.format)
            output = Path(config.output) if config.get("output") else None
            if output is not None and output.is_dir():
                raise UsageError(
                    f"--output={output} is a folder: name the file to write, e.g. {output}/net.onnx"
                )
            if output is not None and (file := blocking_file(output.parent)) is not None:
                raise UsageError(f"--output={output}: {file} is a file, not a folder; choose another")
            if config.get("ckpt_path") is None:
                raise UsageError("export needs trained weights: --ckpt_path=best, --ckpt_path=last or a file")
        elif self.subcommand == "serve":
            if (not config.get("ckpt_path")) == (config.get("exported") is None):
                raise UsageError("serve needs one model: --ckpt_path=best|last|PATH or --exported=FILE")
            limits = (config.max_batch_size, config.batch_timeout, config.max_request_bytes)
            check_serving(config.host, config.port, *limits)
        elif self.subcommand in ("validate", "test", "predict") and config.get("ckpt_path") is None:
            rank_zero_warn(
                f"`{self.subcommand}` without --ckpt_path runs the model's initial, untrained weights. "
                "Pass --ckpt_path=best, --ckpt_path=last or a checkpoint file to use trained ones."
            )

    def choose_optimizers(self, config: Namespace) -> str:
        """Which optimizers `fit` uses, in a line for the console.

        A module with its own `configure_optimizers` keeps it: the default config's `optimizer:`
        and `lr_scheduler:` apply to modules without one. Asking for others (`--optimizer`, a
        `-c` file) replaces it, as Lightning documents.
        """
        described = "Optimizer: {}; LR scheduler: {}".format(
            *(describe(config.get(key)) for key in ("optimizer", "lr_scheduler"))
        )
        model_class = self.chosen_classes()[0]
        if not is_overridden("configure_optimizers", model_class, L.LightningModule):
            return described
        name = f"{model_class.__name__}.configure_optimizers"
        # Compared with the defaults, not read from the flags: a run's own config.yaml given back
        # with -c names the optimizer it was trained with, and asks for no other.
        without_flags = subcommand_defaults(self, self.subcommand)
        asked = any(config.get(key) != without_flags.get(key) for key in ("optimizer", "lr_scheduler"))
        self.auto_configure_optimizers = asked  # Lightning's switch for replacing the module's
        if not asked:
            return f"Optimizer: {name} (the module's own: the config's optimizer is for modules without one)"
        return f"{described} (as asked, in place of {name})"

    def instantiate_classes(self) -> None:
        # A model's or DataModule's ValueError on its settings (batch_size=0, ...) and the
        # Trainer's refusals (an unknown accelerator, FSDP without a GPU) are messages for the
        # user, not tracebacks.
        try:
            with warnings.catch_warnings():  # choose_optimizers says it, in its line
                warnings.filterwarnings("ignore", message=".*configure_optimizers` will be overridden")
                super().instantiate_classes()
            if self.subcommand != "fit" and isinstance(self.datamodule, KitDataModule):
                self.datamodule.fixed_batch_size()  # refuses batch_size=auto, which fit alone resolves
        except ValueError as error:
            raise UsageError(one_line(raised_by_the_class(error))) from error
        check_module_fits(self.model, self.datamodule, self.subcommand, self.auto_configure_optimizers)
        if self.subcommand == "fit":
            rank_zero_info(self.optimizers_used)

    def after_fit(self) -> None:
        """Where the run went: its folder, its best checkpoint with the score, what to run next."""
        lines = [f"Run folder: {self.run_folder.path} (tensorboard --logdir {self.run_folder.runs.parent})"]
        best = self.best_checkpoint
        if best is not None and best.best_model_path and best.best_model_score is not None:
            score = f"{best.monitor} {float(best.best_model_score):.4g}"
            path = Path(best.best_model_path).absolute()
            shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
            lines.append(f"Best checkpoint: {shown} ({score})")
            lines.append("Next: python main.py test --ckpt_path=best")
        if self.trainer.is_global_zero:
            print("\n".join(lines), flush=True)

    def after_validate(self) -> None:
        self.say_where_scores_went("Validation")

    def after_test(self) -> None:
        self.say_where_scores_went("Test")

    def say_where_scores_went(self, stage: str) -> None:
        """One line after the scores table: the run folder that holds them (the checkpoint's own run)."""
        if not self.trainer.loggers or not self.trainer.is_global_zero:
            return
        beside = ", the run its checkpoint came from" if self.run_folder.evaluates else ""
        tensorboard = f"tensorboard --logdir {self.run_folder.runs.parent}"
        print(f"{stage} scores logged to {self.run_folder.path}{beside} ({tensorboard})", flush=True)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config_init[self.subcommand]
        guard = [self.fit_guard(config)] if self.subcommand == "fit" else []  # first: see fit_guard.py
        callbacks = [*guard, *(config.trainer.get("callbacks") or []), *self.subcommand_callbacks(config)]
        self.run_folder.use_for(callbacks)  # checkpoints go into the run folder, whatever the loggers
        trainer = super().instantiate_trainer(callbacks=callbacks, **kwargs)
        self.run_folder.trainer = trainer  # a run that fails before its first step leaves no folder
        # Every checkpoint written whole or not at all, by whichever writer the strategy has.
        trainer.strategy.checkpoint_io = AtomicCheckpointIO(trainer.strategy.checkpoint_io)
        if type(trainer.profiler) is PassThroughProfiler:  # no profiler asked for: the cheaper nothing
            trainer.profiler = NoProfiler()
        hardware.use_tensor_cores(trainer.accelerator)
        return trainer

    def fit_guard(self, config: Any) -> FitGuard:
        """The guarantees of every fit, in one callback (kit/fit_guard.py)."""
        return FitGuard(**config.guard, saves_last=config.trainer.get("enable_checkpointing") is not False)

    def subcommand_callbacks(self, config: Any) -> list[Callback]:
        """The config groups' callbacks this run asks for: each only when its Trainer flag is on;
        predict's writer of predictions.csv, unless trainer.callbacks has a writer of its own."""
        callbacks: list[Callback] = []
        listed = config.trainer.get("callbacks") or []
        if self.subcommand == "fit":
            if config.trainer.get("enable_checkpointing") is not False:
                self.best_checkpoint = BestCheckpoint(**config.checkpoint)  # named when fit ends
                checkpoints: list[ModelCheckpoint] = [
                    self.best_checkpoint,  # before last: it copies the best file of its own step
                    LastCheckpoint(**config.last_checkpoint, best=self.best_checkpoint),
                ]
                callbacks += checkpoints
            if tunes_batch_size(self.datamodule) or config.tuner.scale_lr != "none":
                callbacks.append(BatchSizeTuner(**config.tuner, record=self.run_folder.record_setting))
        if self.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in listed):
            callbacks.append(PredictionWriter())
        if config.compile.enabled:
            callbacks.append(CompileModel(**config.compile))
        if config.trainer.get("enable_progress_bar") is not False and not any(
            isinstance(callback, ProgressBar) for callback in listed
        ):
            callbacks.append(TQDMProgressBar(**config.progress_bar))
        return callbacks


def link_model_to_data(
    parser: LightningArgumentParser, model_class: type, datamodule_class: type, subclass_mode: bool = False
) -> None:
    """Pass each of the DataModule's `model_links` (`KitDataModule`) to the model's argument of the
    same name, and to its injected `network`'s, once the DataModule is built."""
    parameters = inspect.signature(model_class).parameters
    model = "model.init_args" if subclass_mode else "model"
    for name in datamodule_class.model_links if issubclass(datamodule_class, KitDataModule) else ():
        targets = [f"{model}.{name}"] if name in parameters else []
        targets += [f"{model}.network.init_args.{name}"] if "network" in parameters else []
        for target in targets:
            parser.link_arguments(f"data.{name}", target, apply_on="instantiate")


def raised_by_the_class(error: BaseException) -> BaseException:
    """A class's own error on its settings, out of the wrappers jsonargparse puts around it in
    subclass mode (it tries each type of `Optional[LightningModule]` and reports them all)."""
    wrappers = ("Does not validate against any of the Union subtypes", "Problem with given class_path")
    while error.__cause__ is not None and str(error).startswith(wrappers):
        error = error.__cause__
    return error


def split_by_subcommand(parser_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """LightningCLI's `parser_kwargs` as (the main parser's, each subcommand's), as it splits them."""
    names = KitCLI.subcommands()
    main = {key: value for key, value in parser_kwargs.items() if key not in names}
    return main, {key: value for key, value in parser_kwargs.items() if key in names}


def trained_class(checkpoint: Path | None, spec: dict[str, Any], default: type) -> type:
    """The class a checkpoint's settings name (LightningCLI's `_class_path`, or `class_path`),
    else `default`; one line where it cannot be imported any more."""
    path = spec.get("_class_path") or spec.get("class_path")
    try:
        return chosen_class({"class_path": path}, default)
    except (ImportError, AttributeError) as error:
        raise resume.ResumeError(
            f"--ckpt_path={checkpoint} was trained with {path}, which cannot be imported ({error}): "
            "restore that class, or start a new run without --ckpt_path."
        ) from None


def chosen_class(spec: Any, default: type) -> type:
    """The class a `class_path` spec names (subclass mode), else `default`."""
    path = spec.get("class_path") if isinstance(spec, Namespace | dict) else None
    if not path:
        return default
    module_name, _, class_name = str(path).rpartition(".")
    return getattr(importlib.import_module(module_name), class_name)


def check_module_fits(
    model: L.LightningModule, datamodule: Any, subcommand: str | None, optimizers_replaced: bool
) -> None:
    """Refuse, in one line and before anything runs, what the module does not provide for this
    command (the README's "Bring your own LightningModule" contract)."""
    name = type(model).__name__
    manual = not model.automatic_optimization
    if (
        subcommand == "fit"
        and manual
        and optimizers_replaced
        and is_overridden("configure_optimizers", model, L.LightningModule)
    ):
        raise UsageError(
            f"{name} optimizes manually (automatic_optimization=False) with its own configure_optimizers: "
            "drop --optimizer and --lr_scheduler, which would replace them"
        )
    if subcommand == "fit" and manual and tunes_batch_size(datamodule):
        raise UsageError(
            f"--data.batch_size=auto tunes with steps Lightning optimizes, and {name} optimizes manually "
            "(automatic_optimization=False): pass a number, e.g. --data.batch_size=64"
        )
    if subcommand == "predict" and not is_overridden("predict_step", model, L.LightningModule):
        raise UsageError(
            f"predict needs {name}.predict_step(batch, batch_idx) returning the predictions (a tensor or a "
            "dict of tensors, one entry per sample): define it, or use test for scores"
        )


def check_config_files(args: Sequence[str]) -> None:
    """Each `-c`/`--config` file is readable text: a binary one would end in a UnicodeDecodeError."""
    args = [str(arg) for arg in args]
    named = [after for flag, after in itertools.pairwise(args) if flag in ("-c", "--config")]
    named += [arg.split("=", 1)[1] for arg in args if arg.startswith(("-c=", "--config="))]
    for name in named:
        path = Path(name)
        if not path.is_file():
            continue  # jsonargparse names a missing file itself
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"-c {name} is not a text (UTF-8) config file: pass a YAML file") from None
        except OSError as error:
            raise UsageError(f"-c {name} cannot be read: {error.strerror}") from None


def one_line(error: BaseException) -> str:
    """An exception's message folded onto one line."""
    return " ".join(str(error).split())


def run(
    cli_class: Callable[..., KitCLI],
    args: Sequence[str] | None = None,
    default_config_files: Sequence[Path] = (),
    user_errors: tuple[type[Exception], ...] = (),
) -> KitCLI:
    """Run `cli_class`; mistakes we can name (`KitError`s, and `user_errors`) end as one line."""
    run_folder = RunFolder()  # here, to let go of its lock however the run ends
    try:
        return run_to_the_end(cli_class, args, default_config_files, user_errors, run_folder)
    except BaseException as error:
        # A new run that failed before its first optimizer step leaves no folder behind (run_folder.py).
        if not isinstance(error, SystemExit) or error.code not in (0, None, EXIT_STOPPED):
            run_folder.discard_unfinished()
        raise
    finally:
        run_folder.release()


def run_to_the_end(
    cli_class: Callable[..., KitCLI],
    args: Sequence[str] | None,
    default_config_files: Sequence[Path],
    user_errors: tuple[type[Exception], ...],
    run_folder: RunFolder,
) -> KitCLI:
    """`run`'s work: each way a run can end, as the exit code and one line it ends with."""
    one_line_errors: tuple[type[Exception], ...] = (KitError, *user_errors)
    try:
        return cli_class(default_config_files=default_config_files, args=args, run_folder=run_folder)
    except SIGTERMException as stop:  # Ctrl-C, SIGTERM, SLURM's warning: last.ckpt is saved
        if isinstance(stop, StopRequested) and stop.requeue and rank_zero_only.rank == 0:
            print(launcher.requeue_slurm_job(), file=sys.stderr)
        print(
            f"Stopped before the end (exit code {EXIT_STOPPED}): resume with `fit --ckpt_path=last`.",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_STOPPED) from None
    except one_line_errors as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_code", EXIT_USAGE)) from None
    except MisconfigurationException as error:  # Lightning's own "this setting cannot work"
        print(f"error: {one_line(error)}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except OSError as error:
        if error.errno not in UNWRITABLE:
            raise
        fix = "Free some space or write" if error.errno in FULL else "Write"
        print(
            f"error: cannot write {error.filename or 'a file'}: {error.strerror}. {fix} elsewhere, "
            "e.g. with --trainer.default_root_dir=DIR.",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_USAGE) from None
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
