"""Experiment trackers beside TensorBoard: MLflow and Weights & Biases, one tracker run per job.

Lightning's `MLFlowLogger` and `WandbLogger` with what a job needs on top (the presets in
configs/loggers/ name these):

- **Params once.** The whole config, flattened (`trainer.max_epochs`, `model.network.init_args.width`,
  ...), is logged when the tracker run is created, in place of Lightning's model and DataModule
  hyperparameters: every setting once, under one name. A resumed run logs none again.
- **One run per job.** Only rank 0 creates a run (Lightning's loggers already act on rank 0 only).
  The run's id is written to `trackers.json` in the run folder; `fit --ckpt_path=last` (a
  preemption, a SLURM requeue) and `test --ckpt_path=best` read it back and log into the same
  tracker run.
- **Local by default.** MLflow writes a SQLite store and artifacts under `trainer.default_root_dir`
  unless `MLFLOW_TRACKING_URI` or `tracking_uri` names a server; W&B writes its run folders there
  (`WANDB_MODE=offline`: no account, no network; `wandb sync` uploads later).
- **Sweeps.** The trials of `python main.py sweep` share one MLflow experiment named after the
  study (one W&B group), each run named `trial_NNN`.
"""

import importlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch import loggers

from .errors import KitError
from .files import flatten

TRACKERS_FILE = "trackers.json"  # in the run folder: {"MLFlowLogger": {"run_id": ...}, ...}
# Set by `python main.py sweep` for each trial's `fit`: the study, the trial, the user's log folder.
SWEEP_STUDY, SWEEP_TRIAL, SWEEP_ROOT = "KIT_SWEEP_STUDY", "KIT_SWEEP_TRIAL", "KIT_SWEEP_ROOT"


class TrackerError(KitError):
    """A tracker that cannot start as configured; the message names the fix."""


# Loggers whose package is an optional extra of this project: (class, module, extra, name).
EXTRAS = (
    (loggers.MLFlowLogger, "mlflow", "mlflow", "MLflow"),
    (loggers.WandbLogger, "wandb", "wandb", "Weights & Biases"),
)


def check_installed(specs: list[Any]) -> None:
    """One line naming the install command for a configured logger whose package is missing
    (checked before anything is built: the config parser would bury the reason in a page)."""
    for spec in specs:
        cls = logger_class(spec)
        for base, module, extra, name in EXTRAS:
            if cls is not None and issubclass(cls, base):
                try:
                    importlib.import_module(module)
                except ImportError:
                    raise TrackerError(
                        f'the {name} logger needs {module}: pip install -e ".[{extra}]"'
                    ) from None


def sweep_trial() -> tuple[str, str] | None:
    """(study, `trial_NNN`) when this `fit` is a trial of `python main.py sweep`."""
    study, trial = os.environ.get(SWEEP_STUDY), os.environ.get(SWEEP_TRIAL)
    return (study, f"trial_{int(trial):03d}") if study and trial else None


class Tracker:
    """What the kit's tracker loggers add to Lightning's; mixed in before Lightning's class."""

    resumed = False  # this logger continues a tracker run created by an earlier process
    _config_logged = False

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        # Lightning calls this with the model's and DataModule's hyperparameters; once the CLI has
        # logged the whole config (log_config), they are already there, under their config names.
        if not self._config_logged:
            super().log_hyperparams(params, *args, **kwargs)  # type: ignore[misc]

    def log_config(self, config: Mapping[str, Any], config_file: Path | None) -> None:
        """The run's flattened config as params (a new run only) and its config file (rank 0)."""
        self._config_logged = True
        if not self.resumed:
            self.log_params(flatten(config))
        if config_file is not None and config_file.is_file():
            self.log_file(config_file)

    def log_params(self, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def log_file(self, path: Path) -> None:
        raise NotImplementedError

    def run_record(self) -> dict[str, Any]:
        """What `trackers.json` keeps so that a later process continues this run."""
        raise NotImplementedError

    @classmethod
    def continue_run(cls, init_args: Any, record: Mapping[str, Any]) -> None:
        """Set `init_args` (a config Namespace) so the logger continues the recorded run."""
        raise NotImplementedError

    @classmethod
    def fill_defaults(cls, init_args: Any, root_dir: Path) -> None:
        """Settings left empty in the config, filled in from the run's log folder."""


class MLFlowLogger(Tracker, loggers.MLFlowLogger):
    """Lightning's MLFlowLogger; `tracking_uri: null` means `$MLFLOW_TRACKING_URI`, else a local
    SQLite store `<default_root_dir>/mlflow.db` with artifacts in `<default_root_dir>/mlartifacts`.

    With `log_model: true` (the preset) the best checkpoint is logged as an artifact at the end.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        trial = sweep_trial()
        if trial is not None:
            study, name = trial
            # One experiment per study: `<experiment_name>-<study>`.
            kwargs["experiment_name"] = f"{kwargs.get('experiment_name') or 'lightning_logs'}-{study}"
            kwargs["run_name"] = kwargs.get("run_name") or name
            kwargs["tags"] = {**(kwargs.get("tags") or {}), "sweep.study": study, "sweep.trial": name}
        uri = kwargs.get("tracking_uri") or ""
        if uri.startswith("sqlite:///"):  # SQLite creates the file, not its folder
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(*args, **kwargs)
        self.resumed = kwargs.get("run_id") is not None
        self.tracking_uri = kwargs.get("tracking_uri")  # Lightning keeps its own copy private

    @classmethod
    def fill_defaults(cls, init_args: Any, root_dir: Path) -> None:
        if init_args.get("tracking_uri"):
            return
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            # A sweep's trials share the user's store, not one per trial folder.
            root = Path(os.environ.get(SWEEP_ROOT) or root_dir).resolve()
            uri = f"sqlite:///{root / 'mlflow.db'}"
            init_args.artifact_location = init_args.get("artifact_location") or str(root / "mlartifacts")
        init_args.tracking_uri = uri

    def log_params(self, params: dict[str, Any]) -> None:
        loggers.MLFlowLogger.log_hyperparams(self, params)  # in batches of 100, as MLflow allows

    def log_file(self, path: Path) -> None:
        self.experiment.log_artifact(self.run_id, str(path))

    def run_record(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri}

    @classmethod
    def continue_run(cls, init_args: Any, record: Mapping[str, Any]) -> None:
        same_store = init_args.get("tracking_uri") in (None, record.get("tracking_uri"))
        if init_args.get("run_id") is None and same_store:
            init_args.run_id = record["run_id"]
            init_args.tracking_uri = record.get("tracking_uri")


class WandbLogger(Tracker, loggers.WandbLogger):
    """Lightning's WandbLogger: runs in `<save_dir>/wandb/`.

    Offline (`WANDB_MODE=offline` or `offline: true`) it needs no account and no network;
    `wandb sync <save_dir>/wandb/offline-run-*` uploads the runs later.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        trial = sweep_trial()
        if trial is not None:
            study, name = trial
            kwargs.setdefault("group", study)
            kwargs["name"] = kwargs.get("name") or name
        super().__init__(*args, **kwargs)
        self.resumed = (kwargs.get("id") or kwargs.get("version")) is not None

    @classmethod
    def fill_defaults(cls, init_args: Any, root_dir: Path) -> None:
        folder = init_args.get("save_dir") or init_args.get("dir")
        if folder:  # W&B writes into it, but does not create it
            Path(folder).mkdir(parents=True, exist_ok=True)

    def log_params(self, params: dict[str, Any]) -> None:
        self.experiment.config.update(params, allow_val_change=True)

    def log_file(self, path: Path) -> None:
        # W&B keeps its own config.yaml in the run's files: ours goes beside it, by another name.
        copy = Path(self.experiment.dir) / f"lightning_{path.name}"
        shutil.copyfile(path, copy)
        self.experiment.save(str(copy), base_path=self.experiment.dir, policy="now")

    def run_record(self) -> dict[str, Any]:
        return {"id": self.experiment.id}

    @classmethod
    def continue_run(cls, init_args: Any, record: Mapping[str, Any]) -> None:
        if init_args.get("id") is None and init_args.get("version") is None:
            init_args.id = record["id"]  # Lightning asks W&B to resume ("allow") a run of that id


def tracker_class(spec: Any) -> type[Tracker] | None:
    """The kit tracker class a logger spec (`class_path`, `init_args`) names, else None."""
    cls = logger_class(spec)
    return cls if cls is not None and issubclass(cls, Tracker) else None


def logger_class(spec: Any) -> type | None:
    class_path = spec.get("class_path") if hasattr(spec, "get") else None
    if not isinstance(class_path, str) or "." not in class_path:
        return None
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if isinstance(cls, type) else None
