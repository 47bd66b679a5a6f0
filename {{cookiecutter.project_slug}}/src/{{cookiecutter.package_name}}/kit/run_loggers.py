"""Lightning's TensorBoard and CSV loggers, made to keep one run's story in one folder.

The run folder (run_folder.py) builds these in place of Lightning's own classes of the same
names, so a config naming Lightning's gets them too:

- **HParams that compare runs.** TensorBoard's HParams tab gets the settings a user tunes
  (`comparable_settings`: optimizer, scheduler, model, network, data, precision, devices) under
  their config names, once per training run, and no placeholder `hp_metric` of -1. Each run
  writes only its own session, not an experiment summary of its own: TensorBoard then merges
  every run's settings, lists first those that differ between runs, and offers every scalar of
  a run (val/acc, val/acc_best, test/acc, ...) as its metrics.
- **Evaluation beside training.** `test --ckpt_path=...` of a run logs into that run's folder at
  the step its checkpoint was saved, so its test scores sit beside the curves that led there.
- **One row history.** Lightning's CSV logger deletes a run folder's `metrics.csv` whenever a
  process writes into it again (a resumed fit, a test): this one appends to it.
- **A short scalar list.** Lightning adds `epoch` to every logged step; in TensorBoard that is a
  chart of a straight line, listed before the curves that matter. The CSV file keeps it.
"""

import csv
import os
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch import loggers
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.tensorboard.summary import hparams

from .files import flatten

# The Trainer's settings worth a column: how the run was computed, not where it was written.
TRAINER_SETTINGS = ("max_epochs", "accumulate_grad_batches", "gradient_clip_val")
SECTIONS = ("model", "data", "optimizer", "lr_scheduler")


class EvaluationStep:
    """Mixed in before a Lightning logger: scalars of an evaluation go to its checkpoint's step."""

    evaluated_step: int | None = None  # set when validate/test/predict restores a checkpoint

    def at_checkpoint_step(self, step: int) -> None:
        self.evaluated_step = step

    def _step(self, step: int | None) -> int | None:
        return step if self.evaluated_step is None else self.evaluated_step


class TensorBoardLogger(EvaluationStep, loggers.TensorBoardLogger):
    """Lightning's TensorBoardLogger with the HParams tab the kit fills (`log_settings`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["default_hp_metric"] = False  # no -1 row per run, no -1 point on every curve
        super().__init__(*args, **kwargs)

    @rank_zero_only
    def log_hyperparams(
        self, params: Any, metrics: dict[str, Any] | None = None, step: int | None = None
    ) -> None:
        """The module's and DataModule's hyperparameters go to hparams.yaml, as in Lightning
        (`load_from_checkpoint(hparams_file=...)` reads it); the HParams tab is `log_settings`'."""
        params = params or {}
        self.hparams.update(dict(params) if isinstance(params, Mapping) else vars(params))
        if metrics:
            self.log_metrics(metrics, step)

    @rank_zero_only
    def log_settings(self, settings: Mapping[str, bool | int | float | str]) -> None:
        """This run's session in the HParams tab: its settings, with its scalars as the metrics."""
        _, session_start, _ = hparams(dict(settings), {})
        self.experiment.file_writer.add_summary(session_start)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        shown = {name: value for name, value in metrics.items() if name != "epoch"}
        if shown:
            super().log_metrics(shown, self._step(step))


class CSVLogger(EvaluationStep, loggers.CSVLogger):
    """Lightning's CSVLogger, appending to the run's metrics.csv instead of deleting it."""

    @property
    @rank_zero_experiment  # (a stand-in that does nothing on the other ranks, as Lightning's)
    def experiment(self) -> ExperimentWriter:
        writer = self.__dict__.get("_experiment")
        if writer is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            writer = self._experiment = AppendingWriter(log_dir=self.log_dir)
        return writer

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:  # type: ignore[override]
        super().log_metrics(metrics, self._step(step))


class AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, which continues an existing metrics.csv under its header."""

    def _check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])


def comparable_settings(config: Mapping[str, Any], trainer: L.Trainer) -> dict[str, bool | int | float | str]:
    """The run's settings under their config names, for comparing runs side by side.

    A class is its name (`optimizer: AdamW`, `model.network: ConvNet`) and each of its settings a
    column (`optimizer.lr`, `model.network.width`, a list as its text); settings left unset and
    private entries are left out. The Trainer's are as it resolved them (`trainer.devices: 2`, not `auto`).
    """
    settings: dict[str, bool | int | float | str] = {}
    if config.get("seed_everything") is not None:
        settings["seed_everything"] = config["seed_everything"]
    for section in SECTIONS:
        if section not in config:
            continue
        for key, item in flatten({section: config[section]}, sequences=False).items():
            name = key.replace(".init_args", "")
            if name.endswith(".class_path"):
                name, item = name.removesuffix(".class_path"), str(item).rpartition(".")[2]
            if any(part.startswith("_") for part in name.split(".")):
                continue
            if isinstance(item, bool):  # as YAML spells it (TensorBoard would show 0 and 1)
                settings[name] = str(item).lower()
            elif isinstance(item, int | float | str):
                settings[name] = item
            elif isinstance(item, list | tuple) and all(isinstance(part, int | float | str) for part in item):
                settings[name] = str(list(item))  # hidden_sizes: [64, 32], as the config writes it
            elif item is None and name in SECTIONS:  # lr_scheduler: null
                settings[name] = "none"
    accelerator = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    settings.update(
        {
            "trainer.accelerator": accelerator,
            "trainer.devices": trainer.num_devices * trainer.num_nodes,
            "trainer.strategy": type(trainer.strategy).__name__.removesuffix("Strategy"),
            "trainer.precision": str(trainer.precision),
        }
    )
    for name in TRAINER_SETTINGS:
        value = getattr(trainer, name, None)
        if isinstance(value, bool | int | float | str):
            settings[f"trainer.{name}"] = value
    return settings
