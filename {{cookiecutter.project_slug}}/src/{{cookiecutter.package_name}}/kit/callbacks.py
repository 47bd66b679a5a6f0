"""Callbacks the CLI adds: checkpoints, exact resume, clean stops, the training loss, the prediction
writer, LR logging."""

import csv
import math
import os
import random
import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import lightning as L
import numpy as np
import torch
from lightning.pytorch import callbacks
from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from . import early_signal, internals, step_vote
from .files import copy_atomically

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


def slurm_requeue_signal(trainer: L.Trainer) -> int | None:
    """The signal SLURM sends before the time limit (`--signal`), when this run should requeue."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if environment is None and SLURMEnvironment.detect():  # one device: no cluster environment
        environment = SLURMEnvironment()
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        return int(environment.requeue_signal or signal.SIGUSR1)
    return None


def is_collective_stop(error: BaseException) -> bool:
    """Whether every DDP rank raised this at the same step: a stop they agreed on."""
    return isinstance(error, SIGTERMException | NonFiniteLossError)


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

    def __init__(self, every_n_train_steps: int | None = None) -> None:
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be 1 or more (or null), got {every_n_train_steps}.")
        # save_top_k=0: ModelCheckpoint only resolves the folder; the saving is below.
        super().__init__(filename="last", save_top_k=0, enable_version_counter=False)
        self.save_every_n_steps = every_n_train_steps
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

    @staticmethod
    def _fresh_best(trainer: L.Trainer) -> Path | None:
        """The best checkpoint's file, if it was written a moment ago in this same hook at this same
        step: the very state this would serialise (the best checkpoint saves just before this one,
        Lightning runs checkpoint callbacks last, in order). Copying it saves a second serialisation
        in every epoch that improves: a few milliseconds here, seconds for a large model."""
        for callback in trainer.callbacks:
            written = callback.written_at_epoch_end if isinstance(callback, BestCheckpoint) else None
            # Every rank agrees on the step (Lightning makes the ranks agree on each best); rank zero,
            # which wrote the file, says whether it is one (not a sharded checkpoint's folder).
            if written is not None and written[0] == trainer.global_step:
                return written[1] if trainer.strategy.broadcast(written[1].is_file()) else None
        return None


class LogTrainingLoss(Callback):
    """Logs the loss that `training_step` returns as `train/loss`, on the steps Lightning writes.

    Why not `self.log` in `training_step`: Lightning's bookkeeping of a logged value runs at every
    call, written or not (`log_every_n_steps`), about 0.4 ms here, 7% of the example's step on a
    CPU (benchmarks/README.md), and the progress bar then reads the value back at every step, a
    device sync on a GPU. Here it is logged only on the steps Lightning writes, as a number already
    on the CPU. A model that logs its own training loss does not need this: drop it from
    trainer.callbacks.
    """

    def __init__(self, name: str = "train/loss", prog_bar: bool = True) -> None:
        self.name, self.prog_bar = name, prog_bar

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = trainer.log_every_n_steps
        # Lightning's own rule (its logger connector): global_step has just counted this step.
        written = every > 0 and (trainer.global_step % every == 0 or trainer.should_stop)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not ((written or trainer.fast_dev_run) and isinstance(loss, Tensor)):
            return
        # Lightning passes on the loss divided by accumulate_grad_batches: log the one returned.
        value = loss.detach().cpu() * trainer.accumulate_grad_batches
        pl_module.log(self.name, value, prog_bar=self.prog_bar, on_step=True, on_epoch=False)


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
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    os.replace(partial, path)


class ExactResume(Callback):
    """Makes a resumed run continue exactly where the interrupted one stopped.

    The train loader's position travels in the checkpoint (`StatefulDataLoader`); this adds the
    rest: the random generators (so dropout masks repeat) and the shuffling epoch. The saved
    random state is put back when training starts, not when the checkpoint is read, so that
    what runs in between (the sanity-check validation, a loader drawing its seed) cannot use it
    up. Lightning 2.6 sets a resumed run's sampler one epoch ahead when it resumes from an
    end-of-epoch checkpoint (it passes its `processed` counter, which the restore has already
    moved on), so the epoch is set again from `trainer.current_epoch` when each epoch starts.
    On the CPU with a fixed seed, a resumed run ends with the very same weights as one never
    interrupted.
    """

    def __init__(self) -> None:
        self._device = torch.device("cpu")
        self._saved_state: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._device = trainer.strategy.root_device

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._saved_state is not None:
            self._restore(self._saved_state)
            self._saved_state = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loader = trainer.train_dataloader
        for sampler in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(trainer.current_epoch)

    def state_dict(self) -> dict[str, Any]:
        state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
        kind, keys, position, has_gauss, cached = state
        on_gpu = self._device.type == "cuda"  # this rank's GPU only: never wake the others
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(self._device) if on_gpu else None,
            # Plain types and tensors only: checkpoints load with torch.load(weights_only=True).
            "numpy": {"keys": torch.from_numpy(keys.copy()), "rest": [kind, position, has_gauss, cached]},
            # Python's generator as one tensor: its 625 numbers pickled one by one made up half the
            # objects of each checkpoint write.
            "python": python_state_tensor(random.getstate()),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_state = state_dict  # put back in on_train_start

    def _restore(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        if state["cuda"] is not None and self._device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self._device)
        kind, position, has_gauss, cached = state["numpy"]["rest"]
        np.random.set_state((kind, state["numpy"]["keys"].numpy(), position, has_gauss, cached))
        random.setstate(python_state_tuple(state["python"]))


def python_state_tensor(state: tuple[Any, ...]) -> dict[str, Any]:
    """`random.getstate()` (version, 625 numbers, gauss) with the numbers as one tensor."""
    version, numbers, gauss = state
    return {"version": version, "numbers": torch.tensor(numbers, dtype=torch.int64), "gauss": gauss}


def python_state_tuple(saved: dict[str, Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    """What `random.setstate` takes, from `python_state_tensor`'s form or the tuple itself (older
    checkpoints)."""
    if isinstance(saved, tuple):
        return saved
    return saved["version"], tuple(saved["numbers"].tolist()), saved["gauss"]


EXIT_STOPPED = 128 + signal.SIGTERM  # what a stopped run exits with, as a shell reports SIGTERM


class StopRequested(SIGTERMException):
    """A signal reached some rank; every rank stops at the end of the same step (exit code 143).

    `requeue`: it was SLURM's warning before the time limit, and the job should be requeued.
    """

    def __init__(self, requeue: bool = False) -> None:
        super().__init__(EXIT_STOPPED)  # also when nothing catches it: the process exits 143
        self.requeue = requeue


class GracefulInterrupt(Callback):
    """Makes Ctrl-C and SIGTERM stop training cleanly: finish the step, save `last.ckpt`, exit 143.

    A bare KeyboardInterrupt can land anywhere, even halfway through an optimizer step, and
    leave a torn state behind. So both signals only note the request; training stops at a step's
    end. A second Ctrl-C aborts at once.

    The handlers are ours from `setup` until the process ends, so no signal ever meets the
    default action (death by SIGTERM) in between: before training starts the request waits
    for it; after training ends (the last step, the final saves, teardown) the run stops at
    once with exit code 143, its state already saved. SLURM's warning that came earlier, while
    the process started, was noted by kit/early_signal.py and is acted on from `setup` too.
    Nothing is ever re-sent as a signal:
    a signal sent to oneself can arrive after the handler meant for it is gone.

    On one device, the request goes to Lightning, which stops after the current batch (the
    path a preempted job takes). A stop that arrives during validation lets that validation
    finish first (forward passes only): the epoch's metrics and best checkpoint are kept, and
    the resumed run starts the next epoch instead of skipping the validation it never
    finished. A second SIGTERM stops validation too.

    Under DDP the handler only notes the signal: Lightning's own runs a collective inside the
    handler, on the signalled rank alone, which can leave the ranks waiting in different
    collectives for ever. At each training step the ranks agree whether any of them was
    signalled and, if so, all stop at the end of that step, so last.ckpt is consistent. (Not
    after an epoch's last step: that state would resume in the wrong epoch; the next step
    decides.) They agree before the optimizer step, in the vote the NaN stop takes anyway
    (kit/step_vote.py): one collective a step for both.
    An error on one rank alone ends the others too, instead of leaving them waiting.
    """

    def __init__(self) -> None:
        # idle -> before (setup) -> training -> after (training over) or stopping (an exception)
        # -> done (teardown)
        self._phase: Literal["idle", "before", "training", "after", "stopping", "done"] = "idle"
        self._lightning_sigterm: Any = None  # Lightning's SIGTERM handler, called (not signalled)
        self._forwarding = False
        self._validating = False
        self._deferred = False
        self._distributed = False
        self._requested = False  # a stop signal reached this rank
        self._stop_at_step_end = False  # ... and this callback (not Lightning) stops the run
        self._ctrl_c = False  # ... and it was Ctrl-C: a second one aborts at once
        self._requeue = False  # ... and it was SLURM's warning before the time limit
        self._voted = False  # under DDP: the ranks voted on stopping in this step
        self._agreed_stop = False  # ... and one of them was asked to stop

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Before Lightning installs its own handlers: it puts back what it found (ours) when its
        # loop ends, where it would otherwise put back the default action.
        if stage != "fit" or threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only
        self._phase = "before"
        self._distributed = trainer.world_size > 1
        self._requested = self._stop_at_step_end = self._ctrl_c = self._requeue = self._deferred = False
        signums: list[int] = [signal.SIGINT, signal.SIGTERM]
        requeue_signal = slurm_requeue_signal(trainer)
        if requeue_signal is not None:  # Lightning's would save and requeue inside the handler
            signums.append(requeue_signal)
        else:
            early_signal.release()
        for signum in signums:
            signal.signal(signum, self._on_signal)
        if early_signal.take():  # SLURM's warning during start-up: stop as soon as training can
            self._on_signal(requeue_signal or signal.SIGTERM, None)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._distributed = trainer.world_size > 1
        self._voted = self._agreed_stop = False
        if self._distributed:
            step_vote.ask(trainer, "stop requested", lambda: self._requested, self._told)
        if self._phase != "before":
            return
        # Lightning's handler (which calls ours too) is replaced by ours alone; ours calls it.
        current = signal.getsignal(signal.SIGTERM)
        self._lightning_sigterm = current if current != self._on_signal else None
        signal.signal(signal.SIGTERM, self._on_signal)
        self._phase = "training"
        if self._requested:  # a signal arrived before training started
            self._stop_now(trainer)

    def on_before_optimizer_step(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self._distributed:
            step_vote.take(trainer)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        voted, self._voted = self._voted, False
        if batch_idx + 1 >= trainer.num_training_batches:  # an epoch's last step: see above
            return
        if self._distributed:  # a step without an optimizer step took no vote: the ranks agree here
            stop = self._agreed_stop or (
                not voted and trainer.strategy.reduce_boolean_decision(self._requested, all=False)
            )
        else:
            stop = self._stop_at_step_end
        if stop:
            raise StopRequested(requeue=self._requeue)

    def _told(self, any_rank_asked: bool) -> None:
        self._voted = True
        self._agreed_stop = self._agreed_stop or any_rank_asked

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = not trainer.sanity_checking and not self._distributed

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = False
        if self._deferred:  # now Lightning stops after this step, saving on the way out
            self._deferred = False
            self._pass_to_lightning(signal.SIGTERM, None)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the last step Lightning no longer stops for a signal: a request that came in
        # since (or during the final validation) still ends the run as stopped, on every rank.
        if self._phase != "training":
            return
        if self._distributed:
            stop = trainer.strategy.reduce_boolean_decision(self._requested, all=False)
        else:
            stop = self._requested
        self._phase = "after"
        if stop:
            raise StopRequested(requeue=self._requeue)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, error: BaseException) -> None:
        # An error on one DDP rank: the other ranks wait in a collective that will never
        # complete. The main process ends the ones it started (Lightning does the same on
        # Ctrl-C); torchrun and SLURM's srun --kill-on-bad-exit end theirs.
        if self._phase != "idle":
            self._phase = "stopping"  # a signal now must not cut short the saves on the way out
        if self._distributed and not is_collective_stop(error):
            internals.end_other_ranks(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # The handlers stay: a signal from now until the process exits still means "stopped"
        # (exit code 143), never death by the default action.
        if self._phase == "idle":
            return
        late_stop = self._phase == "after" and self._requested  # a DDP rank signalled after training
        self._phase = "done"
        self._lightning_sigterm = None
        if late_stop:  # every collective is over: this rank can stop alone
            raise StopRequested(requeue=self._requeue)

    def _stop_now(self, trainer: L.Trainer) -> None:
        if self._distributed:  # only where every rank is: at a step's end
            return
        raise StopRequested(requeue=self._requeue)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._forwarding:  # Lightning's handler calling ours back
            return
        if self._phase == "idle":
            return
        if signum == signal.SIGINT:
            if self._ctrl_c:
                raise KeyboardInterrupt  # the second Ctrl-C: abort at once
            self._ctrl_c = True
            rank_zero_info("\nCtrl-C: finishing this step and saving last.ckpt (again: abort at once).")
        elif signum != signal.SIGTERM:
            self._requeue = True
            print(f"SLURM's time-limit warning on PID {os.getpid()}: stopping to requeue.", flush=True)
        first = not self._requested
        self._requested = True
        if self._phase == "done" or (self._phase == "after" and not self._distributed):
            raise StopRequested(requeue=self._requeue)  # training is over, its state saved or saving
        if self._phase == "after":
            return  # a DDP rank: the last collectives first; it stops at teardown
        if self._phase == "stopping":
            return  # already on the way out, saving
        if self._phase == "before":
            if first:
                print(f"Stop requested on PID {os.getpid()}: stopping when training starts.", flush=True)
            self._stop_at_step_end = True
            if not self._distributed:
                self._pass_to_lightning(signal.SIGTERM, frame)
            return
        if self._distributed or signum not in (signal.SIGINT, signal.SIGTERM) or not self._lightning_sigterm:
            self._stop_at_step_end = True
            if first:
                name = signal.Signals(signum).name
                print(f"Received {name} on PID {os.getpid()}: every rank stops after this step.", flush=True)
            return
        if self._validating and not self._deferred:
            self._deferred = True
            rank_zero_info("\nStop requested: finishing this validation first, then saving last.ckpt.")
            return
        self._deferred = False
        self._pass_to_lightning(signal.SIGTERM, frame)

    def _pass_to_lightning(self, signum: int, frame: Any) -> None:
        """Lightning's own SIGTERM handler, called directly: it notes the stop for its loops."""
        handler = self._lightning_sigterm if self._phase == "training" else signal.getsignal(signal.SIGTERM)
        if not callable(handler) or handler == self._on_signal:
            return
        self._forwarding = True
        try:
            handler(signum, frame)
        finally:
            self._forwarding = False


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and what to try."""


class StopOnNonFiniteLoss(Callback):
    """Stops training at the first NaN or infinite loss, before it reaches the weights.

    The loss is checked after the backward pass, before the optimizer step, so the weights and
    the optimizer's state (and the `last.ckpt` saved on the way out) are those of the last good
    step. On an NVIDIA GPU the loss's verdict is copied to the CPU as soon as the forward pass
    has computed it and read only before the step: the backward pass stays queued meanwhile, so
    the check does not leave the GPU idle. The forward pass of a bad batch has already moved the
    buffers (BatchNorm's running statistics), so they are copied where each optimizer step's
    batches start (the first of them, with gradient accumulation) and put back. Under DDP the
    ranks agree, so none is left waiting: in one collective a step, shared with the stop
    requests of GracefulInterrupt (kit/step_vote.py).
    """

    def __init__(self) -> None:
        self._buffers: list[Tensor] = []
        self._saved_buffers: list[Tensor] = []
        # One per backward pass since the last optimizer step: (loss, verdict, when it is ready).
        self._pending: list[tuple[Tensor, Tensor | bool, torch.cuda.Event | None]] = []
        self._bad_losses: list[Tensor] = []  # the non-finite ones among them, once read
        self._bad_on_a_rank = False  # under DDP: the vote's answer

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Found once: walking the modules at every step would cost more than the copies.
        self._buffers = [buffer for buffer in pl_module.buffers() if buffer.is_floating_point()]
        self._saved_buffers = [buffer.detach().clone() for buffer in self._buffers]
        self._pending, self._bad_losses = [], []
        if trainer.world_size > 1:
            step_vote.ask(trainer, "non-finite loss", self._read_verdicts, self._told)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._pending:  # accumulating into the same step: keep the buffers saved before it
            return
        for saved, buffer in zip(self._saved_buffers, self._buffers, strict=True):
            saved.copy_(buffer)  # buffers take no part in autograd: no torch.no_grad() needed

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        loss = loss.detach()
        ready = None
        finite: Tensor | bool
        if loss.device.type == "cpu":  # nothing to wait for: a number now costs less than a tensor op
            finite = math.isfinite(loss.item()) if loss.numel() == 1 else bool(loss.isfinite().all())
        else:
            finite = torch.isfinite(loss).all()
            if finite.is_cuda:  # copied without waiting; the event marks its landing
                finite = finite.to("cpu", non_blocking=True)
                ready = torch.cuda.Event()
                ready.record()
        self._pending.append((loss, finite, ready))

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self._read_verdicts()
        if trainer.world_size > 1:
            step_vote.take(trainer)  # unless GracefulInterrupt, called before, took it
        bad_losses, self._bad_losses = self._bad_losses, []
        bad = self._bad_on_a_rank if trainer.world_size > 1 else bool(bad_losses)
        if not bad:
            return
        for saved, buffer in zip(self._saved_buffers, self._buffers, strict=True):
            buffer.copy_(saved)
        kept = any(isinstance(callback, LastCheckpoint) for callback in trainer.callbacks)
        value = f"{bad_losses[0].item()}" if bad_losses else "not finite on another rank"
        raise NonFiniteLossError(
            f"the training loss is {value} at step {trainer.global_step} "
            f"(epoch {trainer.current_epoch}); training stopped before it changed the weights"
            f"{', and last.ckpt holds the last good state' if kept else ''}. Try a lower learning "
            "rate, gradient clipping (--trainer.gradient_clip_val=1.0), or check the data."
        )

    def _read_verdicts(self) -> bool:
        """Whether this rank had a non-finite loss since the last optimizer step (waits for the GPU's)."""
        pending, self._pending = self._pending, []
        for loss, finite, ready in pending:
            if ready is not None:
                ready.synchronize()
            if not finite:
                self._bad_losses.append(loss)
        return bool(self._bad_losses)

    def _told(self, bad_on_a_rank: bool) -> None:
        self._bad_on_a_rank = bad_on_a_rank
