"""The run folder: one `<runs>/version_N` per run, whichever loggers are configured.

Lightning leaves the folder to the first logger: TensorBoard's and CSV's are run folders, a
tracker's (MLflow, W&B) is not, with `--trainer.logger=false` there is none, and two loggers
each pick their own next `version_N`. The kit decides instead, in one object:

- **Where.** `<first TensorBoard/CSV logger's save_dir>/<name>`, else
  `<default_root_dir>/lightning_logs` (Lightning's default logger's). Every TensorBoard and CSV
  logger writes into the same `version_N` (their `version` argument), and checkpoints go to its
  `checkpoints/` (`ModelCheckpoint.dirpath`), with or without a logger.
- **Which run.** A new run takes the next free N when its loggers are built; `fit --ckpt_path=...`
  on a checkpoint of a run folder continues that folder, locked against a second `fit`.
  `--ckpt_path=best|last` is a lookup across the runs (`find`).
- **Tracker runs.** MLflow's and W&B's run ids go to `trackers.json` in the folder; a resumed
  `fit` or a `test` of its checkpoint logs into the same tracker runs.
- **The recipe.** `config.yaml` holds the settings as asked: no version, no run id, no resumed
  checkpoint, so `fit -c config.yaml` trains the run again from scratch.

Nothing is created before the Trainer sets up (the folder of a resumed run already exists), so
a run refused before that leaves nothing behind. A new run that fails later, before its first
optimizer step and so without a checkpoint (a network whose first forward fails, an empty predict
set), has its folder removed by `discard_unfinished`, with the empty parent folders it made:
nothing is left for TensorBoard to list or `best`/`last` to walk past. A resumed run's folder,
and a run that trained (its curves show how it failed), stay.
"""

import contextlib
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from typing import IO, Any, NamedTuple

import lightning as L
import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only

from . import run_loggers, trackers
from .errors import KitError
from .files import blocking_file, missing_folders, write_atomically


def class_path(cls: type) -> str:
    """The dotted path a config file names a class by."""
    return f"{cls.__module__}.{cls.__qualname__}"


# Loggers that write `<save_dir>/<name>/version_N` run folders.
RUN_FOLDER_LOGGERS = (TensorBoardLogger, CSVLogger)
# Lightning's, by each name a config may give it, and the kit's subclass built in its place.
RUN_LOGGERS = {
    f"{module}.{lightning.__name__}": class_path(ours)
    for lightning, ours in (
        (TensorBoardLogger, run_loggers.TensorBoardLogger),
        (CSVLogger, run_loggers.CSVLogger),
    )
    for module in ("lightning.pytorch.loggers", lightning.__module__)
}
TRACKERS_FILE = trackers.TRACKERS_FILE
LOCK_FILE = ".fit.lock"


class RunFolderError(KitError):
    """A run folder that cannot be used as asked; the message names it and the fix."""


def version_number(folder: Path) -> int | None:
    """N for a folder named `version_N`, else None."""
    prefix, _, number = folder.name.partition("_")
    return int(number) if prefix == "version" and number.isdigit() else None


def next_version(runs: Path) -> int:
    """One more than the highest `version_N` in `runs` (0 in a new folder)."""
    numbers = [version_number(run) for run in runs.glob("version_*")]
    return max((number for number in numbers if number is not None), default=-1) + 1


class RunFolder:
    """The current run's folder, and where earlier runs' checkpoints are found.

    Filled in as the CLI learns: `read` the parsed trainer settings, `continue_run` a checkpoint,
    `configure_loggers` the Trainer builds, `use_for` its checkpoint callbacks.
    """

    def __init__(self) -> None:
        self.root_dir = Path(".")
        self.runs = Path("lightning_logs")  # holds version_0, version_1, ...
        self.specs: list[Any] = []  # each configured logger's class_path/init_args, as parsed
        self.default_logger = True  # `trainer.logger` unset: Lightning's default TensorBoard logger
        self.version: int | str | None = None  # chosen when first needed; a resumed run's N
        self.resumed = False  # `fit` continues a run folder that already exists
        self.evaluates = False  # validate/test/predict write into the run that trained the checkpoint
        self.new = False  # this process chose the next free version: the folder is this run's own
        self.tracker_runs: dict[str, Any] = {}  # trackers.json of the run this one continues
        self.recipe: Namespace | None = None  # the subcommand's settings as asked: config.yaml
        self.made: list[Path] = []  # this new run's version_N folder(s), and the parents they need
        self.made_parents: list[Path] = []
        self.trainer: L.Trainer | None = None  # this run's, once built: how far it got
        self.config_file: RunConfig | None = None  # what writes config.yaml (it introduces itself)
        self._lock: IO[str] | None = None

    def read(self, trainer: Any) -> None:
        """Take the loggers and `default_root_dir` from the parsed `trainer` settings (unchanged)."""
        self.root_dir = Path(trainer.get("default_root_dir") or ".")
        self.default_logger = trainer.get("logger") in (None, True)
        self.specs = logger_specs(trainer)
        folders = self.folder_specs()
        self.runs = runs_of(folders[0].init_args) if folders else self.root_dir / "lightning_logs"
        asked = [spec.init_args.version for spec in folders if spec.init_args.get("version") is not None]
        if asked:  # a version set in the config names the run folder (N, or a folder name)
            self.version = asked[0]
        # Checked before anything is written: a folder that a file stands in the way of.
        settings = [(self.root_dir, "--trainer.default_root_dir"), (self.runs, "the logger's save_dir")]
        for folder, setting in settings:
            file = blocking_file(folder)
            if file is not None:
                raise RunFolderError(
                    f"{setting}: cannot write runs under {folder}, since {file} is a file, not a folder. "
                    "Choose another folder."
                )

    def folder_specs(self) -> list[Any]:
        """The configured loggers that write `version_N` folders (TensorBoard, CSV)."""
        return [spec for spec in self.specs if _writes_run_folders(spec)]

    # --- Earlier runs --------------------------------------------------------------------------

    def find(self, which: str) -> Path:
        """The newest run's `last.ckpt` (`which="last"`) or its best checkpoint (`which="best"`)."""
        runs = sorted(
            (run for run in self.runs.glob("version_*") if any((run / "checkpoints").glob("*.ckpt"))),
            key=lambda run: max(ckpt.stat().st_mtime for ckpt in (run / "checkpoints").glob("*.ckpt")),
        )
        pattern = "last.ckpt" if which == "last" else "best-*.ckpt"
        for run in reversed(runs):
            matches = sorted((run / "checkpoints").glob(pattern))
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                listing = ", ".join(str(m) for m in matches)
                raise RunFolderError(
                    f"--ckpt_path={which} is ambiguous: {run} holds several ({listing}). "
                    "Pass one as --ckpt_path=PATH."
                )
        raise RunFolderError(
            f"--ckpt_path={which}: no {pattern} in any run under {self.runs}. "
            "Train first with `python main.py fit`, or pass a checkpoint file as --ckpt_path=PATH."
        )

    def describe_pick(self, which: str, checkpoint: Path) -> str:
        """The console line for `--ckpt_path=best|last`: the file, its run and how far it trained
        (and its score); for `best`, an earlier run whose best scored higher, and how to take it."""
        picked = checkpoint_summary(checkpoint)
        run = checkpoint.parent.parent.name
        line = f"--ckpt_path={which}: {checkpoint} (the newest run with one, {run}; {picked.text})"
        if which != "best" or picked.score is None:
            return line
        best, best_path = picked, checkpoint
        for other in self.runs.glob("version_*/checkpoints/best-*.ckpt"):
            try:
                rival = checkpoint_summary(other)
            except Exception:  # a damaged file elsewhere: no rival, not this run's error
                continue
            if rival.beats(best):
                best, best_path = rival, other
        if best_path == checkpoint:
            return line
        return f"{line}. {best_path.parent.parent.name} scored higher ({best.text}): --ckpt_path={best_path}"

    def continue_run(self, checkpoint: Path, resume: bool) -> None:
        """A checkpoint of one of our runs: its trackers' runs continue; with `resume` (fit), the
        run folder too, locked at once against a second `fit` of it."""
        run = checkpoint.resolve().parent.parent
        if run.parent != self.runs.resolve() or version_number(run) is None:
            return
        records = run / TRACKERS_FILE
        self.tracker_runs = json.loads(records.read_text()) if records.is_file() else {}
        if self.version is None:
            self.version = version_number(run)
        here = self.path.resolve() == run
        if resume:
            self.resumed = here
            if self.resumed and rank_zero_only.rank == 0:
                self.lock()
        else:  # validate, test, predict: their results go beside the training that made the checkpoint
            self.evaluates = here

    # --- This run ------------------------------------------------------------------------------

    def choose_version(self) -> int | str:
        """This run's version: asked for, resumed, or else the next free N (chosen once)."""
        if self.version is None:
            # The next N free in every TensorBoard/CSV logger's folder: they share it.
            folders = [runs_of(spec.init_args) for spec in self.folder_specs()]
            self.version = max(next_version(runs) for runs in [self.runs, *folders])
            self.new = True
            for runs in dict.fromkeys([self.runs, *folders]):  # what a failed run would leave behind
                self.made.append(self.path_in(runs))
                self.made_parents += missing_folders(runs)
        return self.version

    @property
    def path(self) -> Path:
        """`<runs>/version_N` (or `<runs>/<version>` for a version named in the config)."""
        return self.path_in(self.runs)

    def path_in(self, runs: Path) -> Path:
        version = self.choose_version()
        return runs / (version if isinstance(version, str) else f"version_{version}")

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def configure_loggers(self, trainer: Any) -> None:
        """Write this run's folder and tracker runs into the loggers' constructor arguments.

        `trainer` is the settings the Trainer is built from (not the recipe config.yaml saves):
        each TensorBoard/CSV logger gets this run's `version`, Lightning's default logger is
        spelt out so that it gets it too, and each tracker its local store and the run it
        continues.
        """
        if self.default_logger and trainer.get("logger") in (None, True):
            # Lightning's default: TensorBoard, or CSV where neither tensorboard package is installed.
            tensorboard = any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX"))
            trainer.logger = Namespace(
                class_path=class_path(TensorBoardLogger if tensorboard else CSVLogger),
                init_args=Namespace(save_dir=str(self.root_dir), name="lightning_logs"),
            )
        self.specs = logger_specs(trainer)  # (LightningCLI may have parsed the config anew since `read`)
        for spec in self.specs:  # Lightning's own two, as the kit's (run_loggers.py)
            spec.class_path = RUN_LOGGERS.get(spec.class_path, spec.class_path)
        version = self.choose_version()
        for spec in self.folder_specs():
            spec.init_args.version = version
        for spec in self.specs:
            tracker = trackers.tracker_class(spec)
            if tracker is not None:
                tracker.fill_defaults(spec.init_args, self.root_dir)
                if tracker.__name__ in self.tracker_runs:
                    tracker.continue_run(spec.init_args, self.tracker_runs[tracker.__name__])

    def record_setting(self, trainer: L.Trainer, key: str, value: Any) -> None:
        """A setting found during the run (the size `batch_size=auto` settled on) into config.yaml."""
        if self.config_file is not None:
            self.config_file.record(trainer, key, value)

    def use_for(self, callbacks: list[Any]) -> None:
        """Checkpoints without a folder of their own go into this run's `checkpoints/`."""
        for callback in callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(self.checkpoints.resolve())

    def lock(self) -> None:
        """Hold an exclusive lock on the folder until this process ends: one `fit` per run folder."""
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; nothing to hold
            return
        if self._lock is not None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        lock = (self.path / LOCK_FILE).open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "another process"
            lock.close()
            raise RunFolderError(
                f"{self.path.resolve()} is in use by a running `fit` ({owner}). "
                "Wait for it to end, or stop it first."
            ) from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        self._lock = lock

    def release(self) -> None:
        """Let go of the lock (the end of a run called from Python)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def discard(self) -> None:
        """Remove this run's folder and the empty parents it made, for a run that failed (rank 0).

        Only a folder this process chose as new goes: a resumed run's, or one a config names by
        its version, stays. (Other DDP ranks may have counted one further: they never remove.)
        """
        self.release()
        if not self.new or rank_zero_only.rank != 0:
            return
        for folder in self.made:
            shutil.rmtree(folder, ignore_errors=True)
        for folder in sorted(set(self.made_parents), key=lambda path: len(path.parts), reverse=True):
            with contextlib.suppress(OSError):  # only an empty one: another run may have written there
                folder.rmdir()

    def discard_unfinished(self) -> None:
        """`discard`, for a run that ends in an error before its first optimizer step."""
        if not self.new or (self.trainer is not None and self.trainer.global_step > 0):
            return
        if not any(self.path.glob("checkpoints/*.ckpt")):
            self.discard()

    def record_trackers(self, tracking: list[trackers.Tracker]) -> None:
        """Write `trackers.json` (rank 0): each tracker's run, for a later process to continue."""
        records = {type(tracker).__name__: tracker.run_record() for tracker in tracking}
        write_atomically(self.path / TRACKERS_FILE, json.dumps(records, indent=2) + "\n")


class RunConfig(SaveConfigCallback):
    """Saves the run folder's recipe as its config.yaml (rank 0) and hands it to the trackers.

    The Trainer's loggers were built with this run's version and tracker runs; the recipe is the
    config as asked, without them (and without a resumed `fit`'s checkpoint), so `fit -c
    config.yaml` trains the run again from scratch.
    """

    def __init__(
        self, parser: Any, config: Namespace, *args: Any, run_folder: RunFolder, **kwargs: Any
    ) -> None:
        super().__init__(parser, run_folder.recipe or config, *args, **kwargs)
        self.run_folder = run_folder
        run_folder.config_file = self  # `RunFolder.record_setting` writes through it

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.already_saved:  # type: ignore[has-type]  # set by SaveConfigCallback
            return
        if trainer.is_global_zero:
            if stage == "fit":
                self.run_folder.lock()
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A new run's settings to TensorBoard's HParams tab, as trained (a tuned batch size too)."""
        if self.run_folder.resumed or not trainer.is_global_zero:
            return
        loggers = [logger for logger in trainer.loggers if isinstance(logger, run_loggers.TensorBoardLogger)]
        if loggers:
            settings = run_loggers.comparable_settings(yaml.safe_load(self.parser.dump(self.config)), trainer)
            for logger in loggers:
                logger.log_settings(settings)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """validate/test/predict log at the step their checkpoint was saved: beside its curves."""
        if trainer.state.fn != TrainerFn.FITTING:
            for logger in trainer.loggers:
                if isinstance(logger, run_loggers.EvaluationStep):
                    logger.at_checkpoint_step(int(checkpoint.get("global_step", 0)))

    def record(self, trainer: L.Trainer, key: str, value: Any) -> None:
        """Rewrite config.yaml (rank 0) with one setting found during the run, e.g. the batch size
        `auto` settled on, so that `fit -c config.yaml` runs the same without searching again."""
        if not self.already_saved or not trainer.is_global_zero:  # type: ignore[has-type]
            return
        section, _, name = key.partition(".")
        # `data.batch_size`, or `data.init_args.batch_size` where the config names a class_path
        for candidate in (key, f"{section}.init_args.{name}"):
            if candidate in self.config:
                self.config[candidate] = value
        text = self.parser.dump(self.config, skip_none=False)
        write_atomically(self.run_folder.path / self.config_filename, text)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """config.yaml, the whole config to each tracker (params once; in fit the file as an
        artifact too), and the trackers' run ids into the run folder."""
        text = self.parser.dump(self.config, skip_none=False)
        config_file = self.run_folder.path / self.config_filename
        if not self.run_folder.evaluates:  # an evaluation keeps the recipe of the run it evaluates
            write_atomically(config_file, text)
        tracking = [logger for logger in trainer.loggers if isinstance(logger, trackers.Tracker)]
        for tracker in tracking:
            tracker.log_config(yaml.safe_load(text), config_file if stage == "fit" else None)
        if tracking and stage == "fit":
            self.run_folder.record_trackers(tracking)


class CheckpointSummary(NamedTuple):
    """How far a checkpoint trained and, for a best checkpoint, the score it was kept for."""

    epoch: int
    step: int
    monitor: str | None = None
    score: float | None = None
    mode: str = "max"

    @property
    def text(self) -> str:
        trained = f"epoch {self.epoch}, step {self.step}"
        return trained if self.score is None else f"{self.monitor} {self.score:.4g}, {trained}"

    def beats(self, other: "CheckpointSummary") -> bool:
        """A better score for the same metric."""
        if (
            self.score is None
            or other.score is None
            or (self.monitor, self.mode) != (other.monitor, other.mode)
        ):
            return False
        return self.score > other.score if self.mode == "max" else self.score < other.score


def checkpoint_summary(path: Path) -> CheckpointSummary:
    """Read from the checkpoint (memory-mapped): its epoch and step, and the score of the best
    checkpoint callback that wrote this very file, if one did."""
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    summary = CheckpointSummary(checkpoint.get("epoch", 0), checkpoint.get("global_step", 0))
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if not isinstance(state, dict) or state.get("best_model_score") is None:
            continue
        if Path(str(state.get("best_model_path") or "")).name == path.name:
            mode = re.search(r"'mode': '(min|max)'", str(key))
            score = float(state["best_model_score"])
            return summary._replace(
                monitor=state.get("monitor"), score=score, mode=mode[1] if mode else "max"
            )
    return summary


def runs_of(init_args: Any) -> Path:
    """`<save_dir>/<name>`: where a TensorBoard or CSV logger puts its `version_N` folders."""
    return Path(init_args.save_dir) / (init_args.get("name") or "")


def logger_specs(trainer: Any) -> list[Any]:
    """Each configured logger's `class_path`/`init_args` (none for `logger: false`)."""
    logger = trainer.get("logger")
    loggers = logger if isinstance(logger, list) else [logger]
    return [spec for spec in loggers if isinstance(spec, Namespace) and spec.get("init_args") is not None]


def _writes_run_folders(spec: Any) -> bool:
    cls = trackers.logger_class(spec)
    return cls is not None and issubclass(cls, RUN_FOLDER_LOGGERS) and "save_dir" in spec.init_args
