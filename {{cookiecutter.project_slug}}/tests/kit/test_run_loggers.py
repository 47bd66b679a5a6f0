"""The run's loggers (kit/run_loggers.py): the HParams tab, evaluation beside training, a metrics.csv
that survives a resume, and `--ckpt_path=best` naming the run it took and a better one."""

import csv
import warnings

import lightning as L
import pytest
import torch

from {{ cookiecutter.package_name }}.kit.run_loggers import comparable_settings

from kit_testing import run_fixtures_here, tensorboard_points, tensorboard_settings

CSV_AND_TENSORBOARD = (
    "--trainer.logger+=lightning.pytorch.loggers.TensorBoardLogger",
    "--trainer.logger.save_dir=logs",
    "--trainer.logger+=lightning.pytorch.loggers.CSVLogger",
    "--trainer.logger.save_dir=logs",
)
QUICK = (
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
)


def rows(run_dir) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def test_resume_and_validate_keep_the_runs_history_in_its_folder(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    run_fixtures_here(monkeypatch, "fit", "--trainer.max_epochs=2", *QUICK, *CSV_AND_TENSORBOARD)
    (run_dir,) = (tmp_path / "logs" / "lightning_logs").glob("version_*")
    trained = rows(run_dir)
    assert {row["step"] for row in trained if row.get("train/loss")}, "training rows to keep"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*exists and is not empty")  # Lightning's CSV logger
        last = "--ckpt_path=logs/lightning_logs/version_0/checkpoints/last.ckpt"
        run_fixtures_here(monkeypatch, "fit", "--trainer.max_epochs=3", last, *QUICK, *CSV_AND_TENSORBOARD)
        run_fixtures_here(monkeypatch, "validate", "--ckpt_path=best", *QUICK, *CSV_AND_TENSORBOARD)
    assert sorted(path.name for path in run_dir.parent.iterdir()) == ["version_0"], "no new version_N"
    history = rows(run_dir)
    kept = [{key: row[key] for key in trained[0]} for row in history[: len(trained)]]
    assert kept == trained, "the first process's rows, as it wrote them"
    validated = [row for row in history if row.get("val/acc")]
    assert len(validated) == 4, "epochs 1 and 2, the resumed 3, then validate's"
    out = capsys.readouterr().out
    assert "--ckpt_path=best: " in out and "Validation scores logged to logs/lightning_logs/version_0" in out
    (best,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    saved_at = int(torch.load(best, map_location="cpu", weights_only=False)["global_step"])
    assert int(validated[-1]["step"]) == saved_at, "validate's scores at the step its checkpoint was saved"
    points = tensorboard_points(run_dir)
    assert len(points["val/acc"]) == 4 and points["val/acc"][-1][0] == saved_at, "the same in TensorBoard"
    assert "epoch" not in points and "hp_metric" not in points


def test_the_hparams_session_holds_the_settings_as_trained(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    run_fixtures_here(
        monkeypatch, "fit", "--trainer.max_epochs=1", "--optimizer=SGD", "--optimizer.lr=0.05", *QUICK
    )
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_*")
    settings = tensorboard_settings(run_dir)
    assert settings["optimizer"] == "SGD" and settings["optimizer.lr"] == pytest.approx(0.05)
    assert settings["optimizer.nesterov"] == "false", "booleans as YAML spells them"
    assert settings["trainer.devices"] == 1 and settings["trainer.accelerator"] == "cpu"


def test_comparable_settings_names_classes_and_leaves_out_what_compares_nothing():
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, max_epochs=3)
    config = {
        "seed_everything": 7,
        "model": {
            "class_path": "pkg.models.Net",
            "init_args": {
                "network": {"class_path": "pkg.nets.Conv", "init_args": {"width": 8, "shape": [1, 8]}}
            },
        },
        "data": {"batch_size": 32, "_class_path": "pkg.Data", "data_path": None},
        "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.1, "amsgrad": True}},
        "lr_scheduler": None,
        "trainer": {"default_root_dir": "logs"},
    }
    assert comparable_settings(config, trainer) == {
        "seed_everything": 7,
        "model": "Net",
        "model.network": "Conv",
        "model.network.width": 8,
        "model.network.shape": "[1, 8]",
        "data.batch_size": 32,
        "optimizer": "Adam",
        "optimizer.lr": 0.1,
        "optimizer.amsgrad": "true",
        "lr_scheduler": "none",
        "trainer.accelerator": "cpu",
        "trainer.devices": 1,
        "trainer.strategy": "SingleDevice",
        "trainer.precision": "32-true",
        "trainer.max_epochs": 3,
        "trainer.accumulate_grad_batches": 1,
    }, "no unset path, no private key, no trainer setting of where to write"
