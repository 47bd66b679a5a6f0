"""What `kit/internals.py` relies on in Lightning: these fail loudly when Lightning changes it."""

import subprocess
import sys

import lightning as L
import pytest
import torch
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from {{ cookiecutter.package_name }}.kit.internals import (
    end_other_ranks,
    logging_switched_off,
    subcommand_defaults,
    trial_to_report_to,
)

from kit_fixtures import FEATURES, TinyModel
from kit_testing import extra


def test_the_ddp_launcher_still_ends_the_ranks_it_started():
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False)
    launcher = trainer.strategy.launcher
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    launcher.procs.append(rank)  # as launcher.launch does for each rank it starts
    end_other_ranks(trainer)
    assert rank.wait(timeout=10) == -9, "the launcher no longer kills the ranks it started"


def test_on_one_device_there_are_no_other_ranks_to_end():
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    end_other_ranks(trainer)  # no launcher: nothing to do, and no error
    assert trainer.strategy.launcher is None


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


def test_a_running_trial_found_again_takes_reports_and_finishes_as_itself():
    optuna = extra("optuna", "sweep")
    study = optuna.create_study(direction="maximize")
    started = study.ask()
    (frozen,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    again = trial_to_report_to(study, frozen)
    assert again.number == started.number
    again.report(0.5, step=0)
    study.tell(again, 0.5)
    (finished,) = study.get_trials()
    assert finished.state == optuna.trial.TrialState.COMPLETE and finished.intermediate_values == {0: 0.5}


class PeekedError(Exception):
    """Carries what `Peek` read out of the CLI."""


class Peek(LightningCLI):
    """Reads the defaults of `fit` where KitCLI does (after parsing), then stops."""

    def before_instantiate_classes(self) -> None:
        raise PeekedError(subcommand_defaults(self, "fit"))


def test_each_subcommands_defaults_are_still_read_from_its_own_parser(tmp_path):
    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("trainer:\n  max_epochs: 7\nmodel:\n  hidden: 8\n")
    with pytest.raises(PeekedError) as stop:
        Peek(
            TinyModel,
            args=["fit", "--model.hidden=16"],
            parser_kwargs={"fit": {"default_config_files": [str(defaults)]}},
        )
    (read,) = stop.value.args
    assert read.trainer.max_epochs == 7 and read.model.hidden == 8, "the default config file, not the flags"
