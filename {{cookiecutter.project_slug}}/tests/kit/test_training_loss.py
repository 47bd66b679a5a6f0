"""The fit guard logs `train/loss` as a `self.log` in `training_step` would have, at the same steps."""

import csv
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor

from {{ cookiecutter.package_name }}.kit.fit_guard import FitGuard

from kit_fixtures import Blobs, TinyModel


class LogsItsOwnLoss(TinyModel):
    """Stock Lightning: `self.log` at every step, which Lightning writes every log_every_n_steps."""

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train/loss", loss, prog_bar=True)
        return loss


def written_losses(
    folder: Path, model: type[TinyModel], callbacks: list, **settings: Any
) -> tuple[list, Any]:
    """(step, train/loss) as the CSV logger wrote them, and what the progress bar showed last."""
    L.seed_everything(0)
    trainer = L.Trainer(
        max_epochs=2,
        log_every_n_steps=4,
        logger=CSVLogger(folder),
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        **settings,
    )
    trainer.fit(model(), Blobs())  # built after seeding: the same weights in every run
    with open(Path(trainer.log_dir) / "metrics.csv") as file:
        rows = [row for row in csv.DictReader(file) if row.get("train/loss")]
    return [(int(row["step"]), float(row["train/loss"])) for row in rows], trainer.progress_bar_metrics


@pytest.mark.parametrize("settings", [{}, {"accumulate_grad_batches": 2}, {"max_steps": 13}], ids=str)
def test_the_training_loss_is_written_as_a_self_log_at_every_step_would_write_it(tmp_path, settings):
    ours, our_bar = written_losses(tmp_path / "kit", TinyModel, [FitGuard()], **settings)
    stock, _ = written_losses(tmp_path / "stock", LogsItsOwnLoss, [], **settings)
    assert len(ours) >= 3, ours
    assert ours == stock  # the same steps, the same values
    # The bar shows the loss as last written (the stock bar: the last step's, read back every step).
    assert our_bar["train/loss"] == pytest.approx(ours[-1][1])


def test_a_step_that_returns_no_loss_logs_nothing(tmp_path):
    class NoLoss(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None  # Lightning skips the step

    ours, bar = written_losses(tmp_path, NoLoss, [FitGuard()])
    assert ours == [] and "train/loss" not in bar


def test_a_module_that_logs_its_own_loss_turns_the_guards_off(tmp_path):
    """`--guard.train_loss=null`: the module's own `self.log` is the only train/loss written."""
    ours, _ = written_losses(tmp_path / "kit", LogsItsOwnLoss, [FitGuard(train_loss=None)])
    stock, _ = written_losses(tmp_path / "stock", LogsItsOwnLoss, [])
    assert len(ours) >= 3 and ours == stock
