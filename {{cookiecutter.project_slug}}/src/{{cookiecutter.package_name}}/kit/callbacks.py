"""The callbacks the CLI adds beside the fit guard (kit/fit_guard.py): the best and last
checkpoints, the prediction writer, LR logging."""

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
from lightning.pytorch import callbacks
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from . import internals
from .files import copy_atomically, partial_file
from .fit_guard import is_collective_stop

# Metric names whose direction goes without saying; anything else must state its mode.
HIGHER_IS_BETTER = ("acc", "f1", "auroc", "precision", "recall", "iou", "r2", "hp_metric")
LOWER_IS_BETTER = ("loss", "error", "mse", "mae")


def metric_mode(monitor: str) -> Literal["min", "max"]:
    """`max` for accuracy-like names, `min` for loss-like ones; never a guess for others."""
    name = monitor.lower()
    if any(word in name for word in LOWER_IS_BETTER):
        return "min"
    if any(word in name for word in HIGHER_IS_BETTER):
        return "max"
    raise ValueError(
        f"--checkpoint.monitor={monitor}: cannot tell whether higher or lower is better; "
        "say so with --checkpoint.mode=max or --checkpoint.mode=min."
    )


class SettledCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose name in the checkpoint file (`state_key`) is worked out once.

    Lightning asks for every callback's `state_key` at each hook call, six times a training step,
    and ModelCheckpoint builds its own from a repr of its settings every time (2-4 us): here it is
    built at the first call, when the settings (all given to `__init__`) are final.
    """

    @property
    def state_key(self) -> str:
        key = self.__dict__.get("_state_key")
        if key is None:
            key = self._state_key = super().state_key
        return key


class BestCheckpoint(SettledCheckpoint):
    """Keeps the checkpoint with the best value of `monitor` (validation accuracy), `best-*.ckpt`.

    `mode` follows the metric's name unless given: `max` for `val/acc`, `min` for `val/loss`,
    so pointing `--checkpoint.monitor` at a loss never keeps its worst epoch by accident.
    """

    def __init__(
        self, monitor: str = "val/acc", mode: Literal["min", "max"] | None = None, save_top_k: int = 1
    ) -> None:
        super().__init__(
            monitor=monitor,
            mode=mode or metric_mode(monitor),
            save_top_k=save_top_k,
            filename="best-epoch{epoch:03d}-step{step:06d}",
            auto_insert_metric_name=False,
        )
        # (step, file) of a checkpoint written by the latest on_train_epoch_end: LastCheckpoint,
        # which saves next in that hook, copies it instead of serialising the same state again.
        self.written_at_epoch_end: tuple[int, Path] | None = None
        self._validated_at: int | None = None  # the step of the latest validation scores
        self._best_logged_at: int | None = None  # and of the latest val/acc_best

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: this one saves after validation only, where ModelCheckpoint would check its
        step and time triggers (none here) at every training step."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        self._validated_at = internals.logging_step(trainer)  # where the validation scores went
        # ModelCheckpoint decides in this hook or at the epoch's end (validation once an epoch).
        if not self._should_save_on_train_epoch_end(trainer):
            self.log_best_score(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        kept = set(self.best_k_models)
        super().on_train_epoch_end(trainer, pl_module)
        new = set(self.best_k_models) - kept
        written = not self.save_weights_only and len(new) == 1
        self.written_at_epoch_end = (trainer.global_step, Path(new.pop())) if written else None
        if self._should_save_on_train_epoch_end(trainer):
            self.log_best_score(trainer)

    def log_best_score(self, trainer: L.Trainer) -> None:
        """`<monitor>_best` (val/acc_best) at the step of the validation scores just judged: the
        score of the checkpoint kept so far, the number to compare runs by (TensorBoard's HParams
        tab lists it beside the run's settings)."""
        if self.best_model_score is None or trainer.sanity_checking or not trainer.loggers:
            return
        step = internals.logging_step(trainer) if self._validated_at is None else self._validated_at
        if step == self._best_logged_at:  # once a validation
            return
        self._best_logged_at = step
        for logger in trainer.loggers:
            logger.log_metrics({f"{self.monitor}_best": float(self.best_model_score)}, step=step)


class LearningRateMonitor(callbacks.LearningRateMonitor):
    """Lightning's LearningRateMonitor, which also works with `--trainer.logger=false`.

    Lightning's refuses to train without a logger; with nothing to log to, this one does nothing.
    """

    def on_train_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.loggers:
            super().on_train_start(trainer, *args, **kwargs)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.logging_interval != "epoch" and trainer.loggers:  # checked in the cheaper order
            super().on_train_batch_start(trainer, *args, **kwargs)

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.loggers:
            super().on_train_epoch_start(trainer, *args, **kwargs)


class LastCheckpoint(SettledCheckpoint):
    """Keeps `last.ckpt`: the newest state, to resume from after any interruption.

    Written at the end of every epoch (after its validation), every N training steps when
    asked, when training ends and when it is interrupted (Ctrl-C, SIGTERM, an error). The
    triggers are our own rather than ModelCheckpoint's, which (Lightning 2.6) stop the
    epoch-end save once `every_n_train_steps` is set, and save at an epoch's last batch before
    its validation: a state that Lightning resumes in the wrong epoch. A periodic save that
    falls on an epoch's last batch is left to the epoch-end save moments later. Each write
    goes to a temporary file renamed into place, so a kill never leaves a torn `last.ckpt`.
    """

    FILE_NAME = "last.ckpt"

    def __init__(self, every_n_train_steps: int | None = None, best: BestCheckpoint | None = None) -> None:
        """`best`: the run's BestCheckpoint, whose file of this very step is copied rather than
        the same state serialised again (the CLI passes it; not a setting)."""
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be 1 or more (or null), got {every_n_train_steps}.")
        # save_top_k=0: ModelCheckpoint only resolves the folder; the saving is below.
        super().__init__(filename="last", save_top_k=0, enable_version_counter=False)
        self.save_every_n_steps = every_n_train_steps
        self.best = best
        self._saved_at_step: int | None = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = self.save_every_n_steps
        last_batch = batch_idx + 1 >= trainer.num_training_batches
        if every and trainer.global_step % every == 0 and not last_batch:
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Nothing: the epoch's state is saved once its training part ends too (below)."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer, copy_fresh_best=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, error: BaseException) -> None:
        if trainer.global_step == 0 and not isinstance(error, SIGTERMException):
            return  # a run that failed before its first step has nothing to resume: no checkpoint
        if trainer.world_size > 1 and not is_collective_stop(error):
            # Saving needs every rank, but the others are elsewhere: waiting for them would hang.
            print(f"[rank {trainer.global_rank}] {type(error).__name__}: last.ckpt not updated.", flush=True)
            return
        try:
            self._save(trainer)
        except OSError as save_error:  # e.g. the disk that just filled up: report the first error
            rank_zero_info(f"Could not save last.ckpt on the way out: {save_error}")

    def _save(self, trainer: L.Trainer, copy_fresh_best: bool = False) -> None:
        if trainer.sanity_checking or trainer.fast_dev_run or trainer.global_step == self._saved_at_step:
            return
        if self.dirpath is None:  # failed before ModelCheckpoint.setup: no training state yet
            return
        path = Path(self.dirpath) / self.FILE_NAME
        fresh_best = self._fresh_best(trainer) if copy_fresh_best else None
        if fresh_best is None:
            trainer.save_checkpoint(path, weights_only=False)  # whole or not at all: kit.checkpoint_io
        else:
            if trainer.is_global_zero:
                copy_atomically(fresh_best, path)
            trainer.strategy.barrier("LastCheckpoint copy")  # as trainer.save_checkpoint: all ranks wait
        self._saved_at_step = trainer.global_step
        self.last_model_path = str(path)

    def _fresh_best(self, trainer: L.Trainer) -> Path | None:
        """The best checkpoint's file, if it was written a moment ago in this same hook at this same
        step: the very state this would serialise (Lightning runs checkpoint callbacks last, in
        order, and the CLI lists the best one first). Copying it saves a second serialisation in
        every epoch that improves: a few milliseconds here, seconds for a large model."""
        written = self.best.written_at_epoch_end if self.best is not None else None
        # Every rank agrees on the step (Lightning makes the ranks agree on each best); rank zero,
        # which wrote the file, says whether it is one (not a sharded checkpoint's folder).
        if written is None or written[0] != trainer.global_step:
            return None
        return written[1] if trainer.strategy.broadcast(written[1].is_file()) else None


class PredictionWriter(BasePredictionWriter):
    """Writes `predict` results to `predictions.csv` in the run's log folder, one row a sample.

    `predict_step` returns a tensor (one column, `prediction`) or a dict of tensors (a column
    each, named by its key), one entry per sample along the first dimension; an entry of several
    numbers (class probabilities, a vector) becomes columns `name_0`, `name_1`, ... The first
    column, `index`, is the sample's position in the predict data set. Under DDP each rank writes
    its share, and rank 0 merges the shares in index order, so the file is the same on any
    number of devices.
    """

    def __init__(self) -> None:
        super().__init__(write_interval="epoch")

    def write_on_epoch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / "predictions.csv"
        share = path if trainer.world_size == 1 else log_dir / f".predictions-rank{trainer.global_rank}.csv"
        write_rows(share, predictions, batch_indices[0])  # indices per dataloader; predict uses one
        if trainer.world_size > 1:
            trainer.strategy.barrier("PredictionWriter")
            if trainer.is_global_zero:
                shares = sorted(log_dir.glob(".predictions-rank*.csv"))
                merge_by_index(shares, path)
                for part in shares:
                    part.unlink()
        if trainer.is_global_zero:
            with path.open() as file:
                rows = sum(1 for _ in file) - 1
            print(f"Wrote {rows} predictions to {path}")


def write_rows(path: Path, predictions: Sequence[Any], indices: Sequence[Sequence[int]]) -> None:
    """A CSV of `index` and each predicted column, one row per sample."""
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        header: list[str] = []
        for output, index in zip(predictions, indices, strict=True):
            columns = prediction_columns(output, len(index))
            if not header:
                header = list(columns)
                writer.writerow(["index", *header])
            values = [columns[name] for name in header]
            for position, row in zip(index, zip(*values, strict=True), strict=True):
                writer.writerow([position, *(f"{v:.4f}" if isinstance(v, float) else v for v in row)])


def prediction_columns(output: Any, samples: int) -> dict[str, list[Any]]:
    """One batch's `predict_step` output as named columns of `samples` values each."""
    named = output if isinstance(output, dict) else {"prediction": output}
    columns: dict[str, list[Any]] = {}
    for name, values in named.items():
        if not isinstance(values, Tensor) or values.dim() == 0 or len(values) != samples:
            raise TypeError(
                f"predict_step returned {name}={type(values).__name__} for a batch of {samples}: return a "
                "tensor, or a dict of tensors, with one entry per sample along the first dimension"
            )
        flat = values.detach().reshape(samples, -1).cpu()
        if values.dim() == 1 or flat.shape[1] == 1:
            columns[name] = flat[:, 0].tolist()
        else:
            columns.update({f"{name}_{i}": flat[:, i].tolist() for i in range(flat.shape[1])})
    return columns


def merge_by_index(shares: Sequence[Path], path: Path) -> None:
    """The ranks' CSV files as one, in index order, written atomically."""
    header: list[str] = []
    rows: list[list[str]] = []
    for share in shares:
        with share.open(newline="") as file:
            reader = csv.reader(file)
            header = next(reader, header)
            rows.extend(reader)
    rows.sort(key=lambda row: int(row[0]))
    with partial_file(path) as partial, partial.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
