"""Callbacks the CLI always adds: the two checkpoints and the prediction writer."""

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint


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
                rows = zip(batch["predicted"].tolist(), batch["confidence"].tolist(), batch["target"].tolist())
                writer.writerows((p, f"{c:.4f}", t) for p, c, t in rows)
        print(f"Wrote {sum(len(b['predicted']) for b in predictions)} predictions to {path}")
