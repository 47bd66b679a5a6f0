"""Callbacks the CLI always adds: checkpoints, exact resume, and the prediction writer."""

import csv
import os
import random
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor


class BestCheckpoint(ModelCheckpoint):
    """Keeps the checkpoint with the best validation accuracy, named `best-*.ckpt`."""

    def __init__(self, monitor: str = "val/acc", mode: str = "max", save_top_k: int = 1) -> None:
        super().__init__(
            monitor=monitor,
            mode=mode,
            save_top_k=save_top_k,
            filename="best-epoch{epoch:03d}-step{step:06d}",
            auto_insert_metric_name=False,
        )


class LastCheckpoint(ModelCheckpoint):
    """Keeps `last.ckpt`: the newest state, rewritten every epoch (or every N steps).

    A separate callback on purpose: `ModelCheckpoint(save_last=True, monitor=...)` only
    refreshes `last.ckpt` when the monitored metric improves, so it can lag far behind.
    It also saves when training is interrupted (Ctrl-C, SIGTERM) or fails.
    """

    def __init__(self, every_n_train_steps: int | None = None) -> None:
        super().__init__(
            filename="last",
            save_top_k=1,
            every_n_train_steps=every_n_train_steps,
            enable_version_counter=False,  # overwrite last.ckpt instead of writing last-v1.ckpt
            save_on_exception=True,
        )


class PredictionWriter(BasePredictionWriter):
    """Writes `predict` results to `predictions.csv` in the run's log folder.

    Under DDP every rank writes its own share (`predictions-rank1.csv`, ...).
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
        name = "predictions.csv" if trainer.world_size == 1 else f"predictions-rank{trainer.global_rank}.csv"
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / name
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["predicted", "confidence", "target"])
            for batch in predictions:
                columns = (batch[key].tolist() for key in ("predicted", "confidence", "target"))
                writer.writerows((p, f"{c:.4f}", t) for p, c, t in zip(*columns, strict=True))
        print(f"Wrote {sum(len(b['predicted']) for b in predictions)} predictions to {path}")


class RandomStateCheckpoint(Callback):
    """Stores the random generators in every checkpoint and restores them on resume.

    With the loader skipping already-trained batches, this makes a run resumed from a
    mid-epoch checkpoint draw the same dropout masks, so on the CPU it ends with the very
    same weights as a run that was never interrupted.
    """

    def __init__(self) -> None:
        self._device = torch.device("cpu")

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._device = trainer.strategy.root_device

    def state_dict(self) -> dict[str, Any]:
        kind, keys, position, has_gauss, cached = np.random.get_state()
        on_gpu = self._device.type == "cuda"  # this rank's GPU only: never wake the others
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(self._device) if on_gpu else None,
            # Plain types and tensors only: checkpoints load with torch.load(weights_only=True).
            "numpy": {"keys": torch.from_numpy(keys.copy()), "rest": [kind, position, has_gauss, cached]},
            "python": random.getstate(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.set_rng_state(state_dict["torch"])
        if state_dict["cuda"] is not None and self._device.type == "cuda":
            torch.cuda.set_rng_state(state_dict["cuda"], self._device)
        kind, position, has_gauss, cached = state_dict["numpy"]["rest"]
        np.random.set_state((kind, state_dict["numpy"]["keys"].numpy(), position, has_gauss, cached))
        random.setstate(state_dict["python"])


class GracefulInterrupt(Callback):
    """Makes Ctrl-C stop training cleanly: finish the batch, save `last.ckpt`, exit.

    A bare KeyboardInterrupt can land anywhere, even halfway through an optimizer step, and
    leave a torn state behind. The first Ctrl-C is turned into SIGTERM, which Lightning
    handles after the current batch (the same path a preempted job takes); a second Ctrl-C
    aborts at once.
    """

    def __init__(self) -> None:
        self._previous_handler: Any = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous_handler = signal.signal(signal.SIGINT, self._on_ctrl_c)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def _on_ctrl_c(self, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        rank_zero_info("\nCtrl-C: finishing this batch and saving last.ckpt (press again to abort at once).")
        os.kill(os.getpid(), signal.SIGTERM)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and what to try."""


class StopOnNonFiniteLoss(Callback):
    """Stops training at the first NaN or infinite loss, before it reaches the weights.

    It checks before the backward pass, so the weights (and the `last.ckpt` saved on the way
    out) are those of the last good step. Under DDP the ranks agree, so none is left waiting.
    """

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        bad = not bool(torch.isfinite(loss).all())
        if trainer.strategy.reduce_boolean_decision(bad, all=False):
            raise NonFiniteLossError(
                f"the training loss is {loss.item()} at step {trainer.global_step} "
                f"(epoch {trainer.current_epoch}); training stopped before it changed the weights, and "
                "last.ckpt holds the last good state. Try a lower learning rate, gradient clipping "
                "(--trainer.gradient_clip_val=1.0), or check the data."
            )
