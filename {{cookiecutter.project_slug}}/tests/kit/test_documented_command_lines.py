"""Command lines from Lightning's LightningCLI and Trainer docs, pasted as they are written there,
against the kit's CLI on its fixtures.

Each runs a short real `fit` (or asks for help) in this process and checks that the flag did what
Lightning's docs say it does: the optimizer and scheduler that were built, where files went, how
long it trained. (`tests/test_lightning_docs.py` runs one of them through the example's main.py.)
"""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from kit_testing import run_fixtures_here

# One short epoch: 2 training batches, then 1 validation batch.
SHORT = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
)
# The fixtures' model builds its own optimizer; Lightning's docs pair --lr_scheduler with --optimizer.
ADAM = ("--optimizer=Adam",)


@pytest.fixture
def fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`python -m kit_fixtures ARGS` in this process, in a temp folder (Lightning's default root)."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_fixtures_here(monkeypatch, *args)


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_optimizer_flags_build_that_optimizer(fit, tmp_path):
    fit("fit", *SHORT, "--optimizer=SGD", "--optimizer.lr=0.05")
    group = last_checkpoint(tmp_path)["optimizer_states"][0]["param_groups"][0]
    assert group["lr"] == 0.05 and "momentum" in group and "betas" not in group  # no scheduler here


def test_optimizer_help_lists_that_optimizers_settings(fit, capsys):
    with pytest.raises(SystemExit) as exit_info:
        fit("fit", "--optimizer.help", "SGD")
    assert exit_info.value.code == 0
    assert "--optimizer.momentum" in capsys.readouterr().out


@pytest.mark.slow
def test_lr_scheduler_flags_build_that_scheduler(fit, tmp_path):
    fit("fit", *SHORT, *ADAM, "--lr_scheduler=StepLR", "--lr_scheduler.step_size=7")
    (scheduler,) = last_checkpoint(tmp_path)["lr_schedulers"]
    assert scheduler["step_size"] == 7


@pytest.mark.slow
def test_one_cycle_lr_is_stepped_every_batch(fit, tmp_path):
    fit(
        "fit",
        "--trainer.max_epochs=-1",
        "--trainer.max_steps=7",
        "--trainer.limit_val_batches=1",
        *ADAM,
        "--lr_scheduler=OneCycleLR",
        "--lr_scheduler.max_lr=0.01",
        "--lr_scheduler.total_steps=20",
    )
    checkpoint = last_checkpoint(tmp_path)
    assert checkpoint["global_step"] == 7
    assert checkpoint["lr_schedulers"][0]["last_epoch"] == 7, "stepped per epoch, not per batch"


@pytest.mark.slow
def test_reduce_lr_on_plateau_watches_its_own_monitor_and_mode(fit, tmp_path):
    fit(
        "fit",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=3",
        "--trainer.enable_progress_bar=false",
        *ADAM,
        "--lr_scheduler=ReduceLROnPlateau",
        "--lr_scheduler.monitor=val/acc",
        "--lr_scheduler.mode=max",
    )
    checkpoint = last_checkpoint(tmp_path)
    (scheduler,) = checkpoint["lr_schedulers"]
    assert scheduler["mode"] == "max"
    assert 0 < scheduler["best"] <= 1, "the scheduler saw val/acc, not val/loss"


@pytest.mark.slow
def test_checkpoint_mode_follows_the_monitored_metric(fit, tmp_path):
    fit("fit", *SHORT, "--checkpoint.monitor=val/loss")
    keys = last_checkpoint(tmp_path)["callbacks"]
    assert any(key.startswith("BestCheckpoint") and "'mode': 'min'" in key for key in keys), keys


@pytest.mark.slow
def test_logger_false_trains_without_a_logger(fit, tmp_path):
    fit("fit", *SHORT, "--trainer.logger=false")
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert last_checkpoint(tmp_path)["global_step"] == 2


@pytest.mark.slow
def test_default_root_dir_is_where_everything_goes(fit, tmp_path):
    fit("fit", *SHORT, "--trainer.default_root_dir=elsewhere")
    assert (tmp_path / "elsewhere" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "lightning_logs").exists()


@pytest.mark.slow
def test_overfit_batches_trains_on_the_same_few_batches(fit, tmp_path):
    fit("fit", "--trainer.overfit_batches=2", "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false")
    assert last_checkpoint(tmp_path)["global_step"] == 4


@pytest.mark.slow
def test_environment_variables_set_flags(fit, tmp_path, monkeypatch):
    monkeypatch.setenv("PL_FIT__TRAINER__MAX_EPOCHS", "1")
    fit("fit", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1")
    assert last_checkpoint(tmp_path)["global_step"] == 3


@pytest.mark.slow
def test_several_config_files_stack_later_wins(fit, tmp_path):
    (tmp_path / "a.yaml").write_text("trainer:\n  max_epochs: 5\n  limit_train_batches: 2\n")
    (tmp_path / "b.yaml").write_text("trainer:\n  max_epochs: 1\n")
    fit("fit", "-c", "a.yaml", "-c", "b.yaml", "--trainer.limit_val_batches=1")
    assert last_checkpoint(tmp_path)["global_step"] == 2


@pytest.mark.slow
def test_callbacks_append_from_the_command_line(fit, tmp_path):
    fit(
        "fit",
        *SHORT,
        "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
        "--trainer.callbacks.monitor=val/loss",
    )
    assert any(key.startswith("EarlyStopping") for key in last_checkpoint(tmp_path)["callbacks"])


def test_evaluating_without_a_checkpoint_says_the_weights_are_untrained(fit):
    with pytest.warns(UserWarning, match="untrained weights"):
        fit("validate", "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false")


@pytest.mark.slow
def test_two_loggers_write_each_run_into_one_folder(fit, tmp_path):
    (tmp_path / "loggers.yaml").write_text(
        "trainer:\n"
        "  logger:\n"
        "    - class_path: lightning.pytorch.loggers.TensorBoardLogger\n"
        "      init_args: {save_dir: logs}\n"
        "    - class_path: lightning.pytorch.loggers.CSVLogger\n"
        "      init_args: {save_dir: logs}\n"
    )
    fit("fit", "-c", "loggers.yaml", *SHORT)
    fit("fit", "-c", "loggers.yaml", *SHORT)
    fit("fit", "-c", "loggers.yaml", *SHORT[1:], "--trainer.max_epochs=2", "--ckpt_path=last")
    runs = sorted((tmp_path / "logs" / "lightning_logs").iterdir())
    assert [run.name for run in runs] == ["version_0", "version_1"]
    for run in runs:
        assert (run / "metrics.csv").is_file() and list(run.glob("events.out.tfevents.*"))
    assert last_checkpoint(runs[1])["global_step"] == 4, "the resumed run continued version_1"
