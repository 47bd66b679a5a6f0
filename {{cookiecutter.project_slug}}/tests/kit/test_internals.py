"""What `kit/internals.py` relies on in Lightning: these fail loudly when Lightning changes it."""

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from {{ cookiecutter.package_name }}.kit.internals import logging_switched_off

from kit_fixtures import FEATURES, TinyModel


def attached_outside_the_loops() -> TinyModel:
    model = TinyModel()
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    model.trainer = trainer
    return model


def test_logging_outside_the_loops_still_raises_so_the_tuner_needs_the_switch():
    model = attached_outside_the_loops()
    with pytest.raises(MisconfigurationException):
        model.log("train/loss", 1.0)


def test_with_logging_switched_off_a_training_step_runs_outside_the_loops_and_logs_nothing():
    model = attached_outside_the_loops()
    batch = (torch.randn(8, FEATURES), torch.arange(8) % 3)
    with logging_switched_off(model):
        loss = model.training_step(batch, 0)
        model.log_dict({"a": 1.0})
    assert loss.ndim == 0 and model.trainer.callback_metrics == {}
    assert "log" not in vars(model) and "log_dict" not in vars(model), "the methods are back"
    with pytest.raises(MisconfigurationException):
        model.log("train/loss", 1.0)
