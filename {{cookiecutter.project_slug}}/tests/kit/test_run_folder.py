"""The run folder (kit/run_folder.py): one `version_N` per run whatever the loggers, checkpoints in
it, `best`/`last` across runs, one `fit` per folder, and settings that contradict a checkpoint."""

import os
import time
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import Namespace

from {{ cookiecutter.package_name }}.kit.run_folder import RunFolder, RunFolderError

from kit_testing import run_fixtures_here

TENSORBOARD = "lightning.pytorch.loggers.TensorBoardLogger"
CSV = "lightning.pytorch.loggers.CSVLogger"
MLFLOW = "{{ cookiecutter.package_name }}.kit.trackers.MLFlowLogger"
QUICK_FIT = (
    "fit",
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=1",
)


def trainer_settings(root: Path, *loggers: tuple[str, str | None], logger: object = None) -> Namespace:
    """Parsed `trainer` settings: each logger as (class_path, save_dir)."""
    specs = [
        Namespace(class_path=cls, init_args=Namespace(save_dir=str(root / d) if d else None, name="runs"))
        for cls, d in loggers
    ]
    return Namespace(default_root_dir=str(root), logger=specs or logger)


def folder_for(trainer: Namespace) -> RunFolder:
    run_folder = RunFolder()
    run_folder.read(trainer)
    run_folder.configure_loggers(trainer)
    return run_folder


def test_without_a_logger_the_run_folder_is_lightnings_default_one(tmp_path):
    (tmp_path / "lightning_logs" / "version_4").mkdir(parents=True)
    for logger in (None, False):
        run_folder = folder_for(trainer_settings(tmp_path, logger=logger))
        assert run_folder.path == tmp_path / "lightning_logs" / "version_5"
        assert run_folder.checkpoints == run_folder.path / "checkpoints"


def test_tensorboard_and_csv_share_one_new_version(tmp_path):
    (tmp_path / "tb" / "runs" / "version_0").mkdir(parents=True)
    (tmp_path / "csv" / "runs" / "version_2").mkdir(parents=True)
    trainer = trainer_settings(tmp_path, (TENSORBOARD, "tb"), (CSV, "csv"))
    run_folder = folder_for(trainer)
    assert [spec.init_args.version for spec in trainer.logger] == [3, 3]
    kit = "{{ cookiecutter.package_name }}.kit.run_loggers"
    assert [spec.class_path for spec in trainer.logger] == [f"{kit}.TensorBoardLogger", f"{kit}.CSVLogger"]
    assert run_folder.path == tmp_path / "tb" / "runs" / "version_3", "the first one's folder"


def test_a_tracker_first_still_gets_the_run_folder_of_the_tensorboard_logger(tmp_path):
    trainer = trainer_settings(tmp_path, (MLFLOW, None), (TENSORBOARD, "tb"))
    run_folder = folder_for(trainer)
    assert run_folder.path == tmp_path / "tb" / "runs" / "version_0"
    assert trainer.logger[0].init_args.tracking_uri.startswith("sqlite:///"), "a local store by default"


def test_the_run_folder_is_created_only_when_used_and_discarded_when_new(tmp_path):
    run_folder = folder_for(trainer_settings(tmp_path))
    assert not (tmp_path / "lightning_logs").exists(), "choosing a version writes nothing"
    run_folder.lock()
    assert run_folder.path.is_dir()
    run_folder.discard()
    assert not run_folder.path.exists()
    named = trainer_settings(tmp_path, (TENSORBOARD, "tb"))
    named.logger[0].init_args.version = 7  # a run the config names: maybe an earlier one's
    run_folder = folder_for(named)
    run_folder.lock()
    run_folder.discard()
    assert run_folder.path == tmp_path / "tb" / "runs" / "version_7" and run_folder.path.is_dir()


def checkpoint(run: Path, name: str, age: float) -> Path:
    path = run / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def test_best_and_last_are_the_newest_runs_and_never_guessed(tmp_path):
    runs = tmp_path / "lightning_logs"
    checkpoint(runs / "version_0", "last.ckpt", age=10)
    best = checkpoint(runs / "version_0", "best-epoch=1.ckpt", age=10)
    last = checkpoint(runs / "version_1", "last.ckpt", age=1)  # newer, stopped before a best one
    (runs / "version_2").mkdir()  # an evaluation's run: no checkpoints
    run_folder = folder_for(trainer_settings(tmp_path))
    assert run_folder.find("last") == last
    assert run_folder.find("best") == best
    checkpoint(runs / "version_1", "best-epoch=0.ckpt", age=1)
    checkpoint(runs / "version_1", "best-epoch=2.ckpt", age=1)
    with pytest.raises(RunFolderError, match="--ckpt_path=best is ambiguous"):
        run_folder.find("best")
    with pytest.raises(RunFolderError, match=r"--ckpt_path=last: no last.ckpt in any run under"):
        folder_for(trainer_settings(tmp_path / "elsewhere")).find("last")


def scored_checkpoint(run: Path, name: str, score: float, age: float) -> Path:
    """A checkpoint as BestCheckpoint writes it: its callback state names the file and its score."""
    path = checkpoint(run, name, age)
    state = {"monitor": "val/acc", "best_model_score": torch.tensor(score), "best_model_path": str(path)}
    torch.save(
        {
            "epoch": 2,
            "global_step": 60,
            "callbacks": {"BestCheckpoint{'monitor': 'val/acc', 'mode': 'max'}": state},
        },
        path,
    )
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def test_best_names_its_run_and_score_and_a_better_run_with_the_flag_to_take_it(tmp_path):
    runs = tmp_path / "lightning_logs"
    better = scored_checkpoint(runs / "version_0", "best-epoch002-step000060.ckpt", 0.994, age=10)
    newest = scored_checkpoint(runs / "version_1", "best-epoch002-step000060.ckpt", 0.961, age=1)
    run_folder = folder_for(trainer_settings(tmp_path))
    assert run_folder.find("best") == newest
    line = run_folder.describe_pick("best", newest)
    assert line.startswith(
        f"--ckpt_path=best: {newest} (the newest run with one, version_1; val/acc 0.961, epoch 2"
    )
    assert line.endswith(f"version_0 scored higher (val/acc 0.994, epoch 2, step 60): --ckpt_path={better}")
    assert "scored higher" not in run_folder.describe_pick("best", better)


def test_a_run_folder_is_fitted_by_one_process_at_a_time(tmp_path):
    first, second = folder_for(trainer_settings(tmp_path)), folder_for(trainer_settings(tmp_path))
    first.lock()
    with pytest.raises(RunFolderError, match=f"{first.path.resolve()} is in use by a running `fit` \\(pid"):
        second.lock()
    first.release()
    second.lock()
    second.release()


def fit_fixtures(monkeypatch, tmp_path, *args: str) -> None:
    run_fixtures_here(monkeypatch, *QUICK_FIT, f"--trainer.default_root_dir={tmp_path}", *args)


def test_without_a_logger_checkpoints_land_where_best_and_last_look(monkeypatch, tmp_path):
    fit_fixtures(monkeypatch, tmp_path, "--trainer.logger=false")
    fit_fixtures(monkeypatch, tmp_path, "--trainer.logger=false")
    runs = tmp_path / "lightning_logs"
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    config = yaml.safe_load((runs / "version_1" / "config.yaml").read_text())
    assert config["trainer"]["logger"] is False, "config.yaml: the settings as asked"
    fit_fixtures(
        monkeypatch, tmp_path, "--trainer.logger=false", "--ckpt_path=last", "--trainer.max_epochs=2"
    )
    last = torch.load(runs / "version_1" / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 6, "the newest run went on in its own folder: 2 epochs of 3 steps"
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]


def test_a_model_setting_that_contradicts_the_checkpoint_is_refused(monkeypatch, capsys, tmp_path):
    """The checkpoint's model is what runs: a flag asking for another is an error, not ignored."""
    monkeypatch.chdir(tmp_path)
    fit_fixtures(monkeypatch, tmp_path)
    for subcommand in ("validate", "test", "predict", "export", "serve"):
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            run_fixtures_here(
                monkeypatch, subcommand, f"--trainer.default_root_dir={tmp_path}", "--ckpt_path=last",
                "--model.hidden=32",
            )  # fmt: skip
        stderr = capsys.readouterr().err
        assert refused.value.code == 2, stderr[-3000:]
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "model.hidden: 16 in the checkpoint, 32 now" in errors[0], stderr
        assert f"`{subcommand}` uses the checkpoint's model" in errors[0]
    runs = sorted(p.name for p in (tmp_path / "lightning_logs").iterdir())
    assert runs == ["version_0"], "a refusal writes no run folder"
