"""The command line, called the way users call it: `python main.py SUBCOMMAND ...`."""

import csv
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from {{ cookiecutter.package_name }}.cli import ProjectCLI

from conftest import tensorboard_points, tensorboard_scalars, tensorboard_settings

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"

# A short but real run: enough epochs to learn, small enough for CI.
SHORT_FIT = (
    "fit",
    "--trainer.max_epochs=3",
    "--lr_scheduler.init_args.T_max=3",
    "--trainer.enable_progress_bar=false",
)


def runs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "logs").glob("*/version_*"))


def test_print_config_shows_the_defaults(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--print_config")
    assert exit_info.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["optimizer"]["class_path"] == "torch.optim.AdamW"
    assert config["trainer"]["default_root_dir"] == "logs"
    assert config["seed_everything"] == 42


def test_a_default_fit_hands_the_trainer_few_callbacks(tmp_path, monkeypatch):
    """Lightning calls every hook of every callback at every step: the kit's guarantees ride on
    one guard, and nothing idle is handed over (no prediction writer in fit). Eight today, with
    Lightning's bar and model summary, LightningCLI's config saver and the config's LR monitor
    and pictures (there were twelve)."""

    class BuildOnlyCLI(ProjectCLI):
        def fit(self, **kwargs: Any) -> None:  # build the run as `main.py fit` does, then return
            pass

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["main.py"])
    cli = BuildOnlyCLI([DEFAULT_CONFIG], args=["fit"])
    names = [type(callback).__name__ for callback in cli.trainer.callbacks]
    assert len(names) <= 8, names
    assert names[0] == "FitGuard", names  # first: its signal handlers go in before Lightning's
    assert {"BestCheckpoint", "LastCheckpoint"} <= set(names), names
    assert "PredictionWriter" not in names, names


def test_unknown_flag_is_refused(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--model.no_such_setting=1")
    assert exit_info.value.code != 0
    assert "no_such_setting" in capsys.readouterr().err


def test_ckpt_path_last_without_any_run_says_what_to_do(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("test", "--ckpt_path=last")
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "no last.ckpt" in error and "python main.py fit" in error


def test_missing_data_file_or_config_file_is_one_clear_line(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--data.data_path=nowhere/digits.npz")
    assert exit_info.value.code == 2
    assert "nowhere/digits.npz does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "-c", "no_such_config.yaml")
    assert exit_info.value.code == 2
    assert "no_such_config.yaml" in capsys.readouterr().err


@pytest.mark.slow
def test_fit_then_test_predict_in_new_processes(run_main, tmp_path, capsys):
    run_main(*SHORT_FIT)
    (run_dir,) = runs(tmp_path)
    checkpoints = {p.name for p in (run_dir / "checkpoints").glob("*.ckpt")}
    assert "last.ckpt" in checkpoints and any(name.startswith("best-") for name in checkpoints)
    out = capsys.readouterr().out
    assert f"Run folder: {Path('logs') / 'lightning_logs' / 'version_0'}" in out and "Best checkpoint:" in out

    # TensorBoard: the curves (learning rate beside them), the best score so far, no placeholders.
    scalars = tensorboard_scalars(run_dir)
    for tag in ("train/loss", "train/acc", "train/lr", "val/loss", "val/acc", "val/acc_best"):
        assert scalars.get(tag), f"{tag} missing from TensorBoard: {sorted(scalars)}"
    assert not {"hp_metric", "epoch"} & set(scalars), "a line to ignore in the scalars tab"
    assert scalars["val/acc_best"] == [max(scalars["val/acc"][: i + 1]) for i in range(3)]
    assert scalars["val/loss"][-1] < scalars["val/loss"][0]
    # HParams: what was tuned, under the config's names, as the Trainer ran it.
    settings = tensorboard_settings(run_dir)
    assert settings["optimizer"] == "AdamW" and settings["optimizer.lr"] == pytest.approx(0.002)
    assert settings["model.network"] == "ConvNet" and settings["model.network.width"] == 16
    assert settings["data.batch_size"] == 64 and settings["trainer.precision"] == "32-true"
    assert settings["trainer.devices"] == 1 and settings["lr_scheduler"] == "CosineAnnealingLR"
    assert not [name for name in settings if name.startswith("_") or "._" in name]

    # The saved config reproduces the run.
    saved_config = (run_dir / "config.yaml").read_text()
    saved = yaml.safe_load(saved_config)
    assert saved["trainer"]["max_epochs"] == 3 and saved["optimizer"]["init_args"]["lr"] == 0.002

    # test and predict of the run's checkpoints write into that run: no new version_N.
    run_main("test", "--ckpt_path=best", "--trainer.enable_progress_bar=false")
    out = capsys.readouterr().out
    assert "--ckpt_path=best: " in out and "version_0" in out and "val/acc " in out
    assert f"Test scores logged to {Path('logs') / 'lightning_logs' / 'version_0'}" in out
    assert runs(tmp_path) == [run_dir] and (run_dir / "config.yaml").read_text() == saved_config
    points = tensorboard_points(run_dir)
    ((step, accuracy),) = points["test/acc"]
    assert accuracy > 0.8, f"3 epochs should already be far above chance (0.1), got {accuracy}"
    (best,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    saved_at = torch.load(best, map_location="cpu", weights_only=False)["global_step"]
    assert step == saved_at, "the test score sits at the step its checkpoint was saved"

    run_main("predict", "--ckpt_path=last", "--trainer.enable_progress_bar=false")
    assert runs(tmp_path) == [run_dir]
    with (run_dir / "predictions.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 359
    correct = sum(row["predicted"] == row["target"] for row in rows)
    assert correct / len(rows) > 0.8
