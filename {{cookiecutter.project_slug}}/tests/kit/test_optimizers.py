"""`--optimizer`/`--lr_scheduler` wiring (kit/optimizers.py): each scheduler stepped as its docs say."""

import re

import lightning as L
import pytest
import torch
from jsonargparse import Namespace
from lightning.pytorch.cli import ReduceLROnPlateau as LightningPlateau

from {{ cookiecutter.package_name }}.kit.callbacks import BestCheckpoint
from {{ cookiecutter.package_name }}.kit.errors import UsageError
from {{ cookiecutter.package_name }}.kit.optimizers import configure_optimizers, describe


@pytest.fixture
def optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


def test_without_a_scheduler_the_optimizer_alone(optimizer):
    assert configure_optimizers(None, optimizer) is optimizer


def test_per_batch_schedulers_are_stepped_every_batch_others_every_epoch(optimizer):
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=10)
    assert configure_optimizers(None, optimizer, one_cycle)["lr_scheduler"]["interval"] == "step"
    step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    assert "interval" not in configure_optimizers(None, optimizer, step)["lr_scheduler"]


def test_reduce_on_plateau_watches_its_own_monitor_or_is_refused(optimizer):
    watched = LightningPlateau(optimizer, monitor="val/acc", mode="max")
    assert configure_optimizers(None, optimizer, watched)["lr_scheduler"]["monitor"] == "val/acc"
    blind = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(UsageError, match=re.escape("--lr_scheduler.monitor=val/loss")):
        configure_optimizers(None, optimizer, blind)


@pytest.mark.parametrize(
    ("monitor", "plateau_mode", "watches"),
    [("val/mse", "min", "val/mse"), ("val/acc", "max", "val/acc"), ("val/acc", "min", None)],
)
def test_reduce_on_plateau_without_a_monitor_watches_the_best_checkpoints_metric(
    optimizer, monitor, plateau_mode, watches
):
    """Named once, in `checkpoint.monitor`: unless the two disagree on whether lower is better."""
    trainer = L.Trainer(callbacks=[BestCheckpoint(monitor=monitor)], logger=False)
    module = L.LightningModule()
    module.trainer = trainer
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=plateau_mode)
    if watches is None:
        with pytest.raises(UsageError, match=re.escape("ReduceLROnPlateau (mode min) needs a metric")):
            configure_optimizers(module, optimizer, plateau)
    else:
        assert configure_optimizers(module, optimizer, plateau)["lr_scheduler"]["monitor"] == watches


def test_describe_names_the_class_and_what_differs_from_its_defaults():
    spec = Namespace(class_path="torch.optim.AdamW", init_args=Namespace(lr=0.002, weight_decay=0.01))
    assert describe(spec) == "AdamW(lr=0.002)"
    assert describe(None) == "none"
