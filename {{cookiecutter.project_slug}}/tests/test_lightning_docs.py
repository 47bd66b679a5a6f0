"""Command lines from Lightning's LightningCLI and Trainer docs, pasted as they are written there.

Each runs a short real `fit` (or asks for help) and checks that the flag did what Lightning's docs
say it does: the optimizer and scheduler that were built, where files went, how long it trained.
"""

from pathlib import Path

import pytest
import torch
import yaml

from {{ cookiecutter.package_name }}.cli import cli_main

# One short epoch: 2 training batches, then 1 validation batch.
SHORT = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
)


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_optimizer_flags_build_that_optimizer(run_main, tmp_path):
    run_main("fit", *SHORT, "--optimizer=SGD", "--optimizer.lr=0.05")
    group = last_checkpoint(tmp_path)["optimizer_states"][0]["param_groups"][0]
    assert group["initial_lr"] == 0.05 and "momentum" in group and "betas" not in group


def test_optimizer_help_lists_that_optimizers_settings(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--optimizer.help", "SGD")
    assert exit_info.value.code == 0
    assert "--optimizer.momentum" in capsys.readouterr().out


@pytest.mark.slow
def test_lr_scheduler_flags_build_that_scheduler(run_main, tmp_path):
    run_main("fit", *SHORT, "--lr_scheduler=StepLR", "--lr_scheduler.step_size=7")
    (scheduler,) = last_checkpoint(tmp_path)["lr_schedulers"]
    assert scheduler["step_size"] == 7


@pytest.mark.slow
def test_one_cycle_lr_is_stepped_every_batch(run_main, tmp_path):
    run_main(
        "fit",
        "--trainer.max_steps=7",
        "--trainer.limit_val_batches=1",
        "--lr_scheduler=OneCycleLR",
        "--lr_scheduler.max_lr=0.01",
        "--lr_scheduler.total_steps=20",
    )
    checkpoint = last_checkpoint(tmp_path)
    assert checkpoint["global_step"] == 7
    assert checkpoint["lr_schedulers"][0]["last_epoch"] == 7, "stepped per epoch, not per batch"


@pytest.mark.slow
def test_reduce_lr_on_plateau_watches_its_own_monitor_and_mode(run_main, tmp_path):
    run_main(
        "fit",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=3",
        "--trainer.enable_progress_bar=false",
        "--lr_scheduler=ReduceLROnPlateau",
        "--lr_scheduler.monitor=val/acc",
        "--lr_scheduler.mode=max",
    )
    checkpoint = last_checkpoint(tmp_path)
    (scheduler,) = checkpoint["lr_schedulers"]
    assert scheduler["mode"] == "max"
    assert 0 < scheduler["best"] <= 1, "the scheduler saw val/acc, not val/loss"


@pytest.mark.slow
def test_checkpoint_mode_follows_the_monitored_metric(run_main, tmp_path):
    run_main("fit", *SHORT, "--checkpoint.monitor=val/loss")
    keys = last_checkpoint(tmp_path)["callbacks"]
    assert any(key.startswith("BestCheckpoint") and "'mode': 'min'" in key for key in keys), keys


@pytest.mark.slow
def test_logger_false_trains_without_a_logger(run_main, tmp_path):
    run_main("fit", *SHORT, "--trainer.logger=false")
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert last_checkpoint(tmp_path)["global_step"] == 2


@pytest.mark.slow
def test_default_root_dir_is_where_everything_goes(run_main, tmp_path):
    run_main("fit", *SHORT, "--trainer.default_root_dir=elsewhere")
    assert (tmp_path / "elsewhere" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_overfit_batches_trains_on_the_same_few_batches(run_main, tmp_path):
    run_main(
        "fit", "--trainer.overfit_batches=2", "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"
    )
    assert last_checkpoint(tmp_path)["global_step"] == 4


@pytest.mark.slow
def test_environment_variables_set_flags(run_main, tmp_path, monkeypatch):
    monkeypatch.setenv("PL_FIT__TRAINER__MAX_EPOCHS", "1")
    run_main("fit", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1")
    assert last_checkpoint(tmp_path)["global_step"] == 3


@pytest.mark.slow
def test_several_config_files_stack_later_wins(run_main, tmp_path):
    (tmp_path / "a.yaml").write_text("trainer:\n  max_epochs: 5\n  limit_train_batches: 2\n")
    (tmp_path / "b.yaml").write_text("trainer:\n  max_epochs: 1\n")
    run_main("fit", "-c", "a.yaml", "-c", "b.yaml", "--trainer.limit_val_batches=1")
    assert last_checkpoint(tmp_path)["global_step"] == 2


@pytest.mark.slow
def test_callbacks_append_from_the_command_line(run_main, tmp_path):
    run_main(
        "fit",
        *SHORT,
        "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
        "--trainer.callbacks.monitor=val/loss",
    )
    assert any(key.startswith("EarlyStopping") for key in last_checkpoint(tmp_path)["callbacks"])


def test_evaluating_without_a_checkpoint_says_the_weights_are_untrained(run_main):
    with pytest.warns(UserWarning, match="untrained weights"):
        run_main("test", "--trainer.limit_test_batches=1", "--trainer.enable_progress_bar=false")


def test_calling_the_cli_from_python_reads_the_same_defaults_as_main_py(run_main, capsys):
    with pytest.raises(SystemExit):
        run_main("fit", "--print_config")
    from_main = yaml.safe_load(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        cli_main(["fit", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out) == from_main
    assert from_main["optimizer"]["init_args"]["lr"] == 0.002  # configs/default.yaml, not class defaults


@pytest.mark.slow
def test_two_loggers_write_each_run_into_one_folder(run_main, tmp_path):
    (tmp_path / "loggers.yaml").write_text(
        "trainer:\n"
        "  logger:\n"
        "    - class_path: lightning.pytorch.loggers.TensorBoardLogger\n"
        "      init_args: {save_dir: logs}\n"
        "    - class_path: lightning.pytorch.loggers.CSVLogger\n"
        "      init_args: {save_dir: logs}\n"
    )
    run_main("fit", "-c", "loggers.yaml", *SHORT)
    run_main("fit", "-c", "loggers.yaml", *SHORT)
    run_main("fit", "-c", "loggers.yaml", *SHORT[1:], "--trainer.max_epochs=2", "--ckpt_path=last")
    runs = sorted((tmp_path / "logs" / "lightning_logs").iterdir())
    assert [run.name for run in runs] == ["version_0", "version_1"]
    for run in runs:
        assert (run / "metrics.csv").is_file() and list(run.glob("events.out.tfevents.*"))
    assert last_checkpoint(runs[1])["global_step"] == 4, "the resumed run continued version_1"
