"""The regression example end to end, the way a user runs it: `python main.py fit`, then test,
predict, export, serve, sweep, `--data.batch_size=auto`, a resume after SIGTERM and SIGKILL, a
tracker, and refusals in one line. (The kit's own tests, tests/kit, cover each capability on
fixtures of every task shape; here they run on this project's data and model.)
"""

import csv
import json
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from {{ cookiecutter.package_name }}.data import DiabetesDataModule

from conftest import (
    PROJECT_ROOT,
    extra,
    main_py_process,
    main_py_started,
    tensorboard_scalars,
    tensorboard_settings,
)
from kit_testing import free_port, post_json, stop_server, wait_until_serving

QUIET = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")
TEST_ROWS = 88  # 20% of the 442 patients


def main_py(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = main_py_process(workdir, *args, *QUIET)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def runs(workdir: Path) -> list[Path]:
    return sorted((workdir / "logs").glob("*/version_*"), key=lambda run: int(run.name.split("_")[1]))


def r_squared(rows: list[dict[str, str]]) -> float:
    predicted, target = (np.array([float(row[name]) for row in rows]) for name in ("predicted", "target"))
    return 1 - ((predicted - target) ** 2).sum() / ((target - target.mean()) ** 2).sum()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose logs/ hold one default `fit` (the README's first command) and its `test`."""
    workdir = tmp_path_factory.mktemp("regression")
    main_py(workdir, "fit")
    main_py(workdir, "test", "--ckpt_path=best")
    return workdir


@pytest.mark.slow
def test_the_defaults_beat_a_linear_fit_and_tensorboard_shows_it(trained):
    (fit_run,) = runs(trained)  # test wrote into the run it evaluated
    r2 = tensorboard_scalars(fit_run)["test/r2"][-1]
    assert r2 >= 0.45, f"test R² {r2:.3f}: a linear regression reaches ~0.45 on this data"
    scalars = tensorboard_scalars(fit_run)
    for tag in ("train/loss", "train/lr", "val/mse", "val/mae", "val/r2", "val/mse_best"):
        assert scalars.get(tag), f"{tag} missing from TensorBoard: {sorted(scalars)}"
    assert scalars["val/mse"][-1] < 0.9 * scalars["val/mse"][0] and scalars["val/r2"][-1] > 0.4
    assert scalars["val/mse_best"][-1] == pytest.approx(min(scalars["val/mse"]))  # kept by the lowest
    settings = tensorboard_settings(fit_run)  # the HParams tab's row for this run
    assert settings["model.network"] == "MLP" and settings["model.network.hidden_sizes"] == "[32]"
    assert settings["optimizer.lr"] > 0 and settings["data.batch_size"] > 0
    (best,) = (fit_run / "checkpoints").glob("best-*.ckpt")  # kept by the lowest val/mse
    assert torch.load(best, weights_only=False)["callbacks"]  # a real checkpoint, not a stub
    events = EventAccumulator(str(fit_run), size_guidance={"images": 0}).Reload()
    assert "val/predicted_vs_target" in events.Tags()["images"]
    assert "val/confusion_matrix" not in events.Tags()["images"]


@pytest.mark.slow
def test_predict_writes_values_in_target_units_for_the_test_split_and_for_a_csv(trained):
    main_py(trained, "predict", "--ckpt_path=best")
    with (runs(trained)[-1] / "predictions.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == TEST_ROWS and set(rows[0]) == {"index", "predicted", "target"}
    assert r_squared(rows) >= 0.45  # the same model as `test`, the same rows

    data = DiabetesDataModule()
    features = data.features[data.splits[2]][:5].numpy()
    write_rows(trained / "new.csv", data.feature_names, features)
    main_py(trained, "predict", "--ckpt_path=best", f"--data.predict_path={trained / 'new.csv'}")
    with (runs(trained)[-1] / "predictions.csv").open() as file:
        new = list(csv.DictReader(file))
    assert [row["predicted"] for row in new] == [row["predicted"] for row in rows[:5]]
    assert set(new[0]) == {"index", "predicted"}  # no target column in the file, none written


def write_rows(path: Path, names: list[str], rows: np.ndarray) -> None:
    np.savetxt(path, rows, delimiter=",", header=",".join(names), comments="", fmt="%.6g")


@pytest.mark.slow
def test_export_keeps_parity_and_serve_answers_regression_values(trained):
    extra("onnxruntime", "export")
    extra("litserve", "serve")
    main_py(trained, "export", "--ckpt_path=best")
    (exported,) = runs(trained)[0].glob("export/best-*.onnx")
    metadata = json.loads(exported.with_name(exported.name + ".json").read_text())
    assert metadata["inputs"][0]["shape"] == [None, 10] and metadata["output"]["shape"] == [None]
    assert "num_classes" not in metadata and metadata["parity"]["max_abs_error"] <= 1e-4

    model = load_best(trained)
    data = DiabetesDataModule()
    rows = data.features[data.splits[2]][:8]
    with torch.no_grad():
        expected = model(rows)
    port = free_port()
    server = main_py_started(trained, "serve", f"--exported={exported}", f"--port={port}")
    try:
        url = wait_until_serving(server, port)
        answers = [post_json(url, {"input": row.tolist()}) for row in rows]
        too_short = post_json(url, {"input": rows[0, :9].tolist()})
    finally:
        stop_server(server)
    for (status, answer), value in zip(answers, expected, strict=True):
        assert status == 200 and set(answer) == {"output"}, answer
        assert answer["output"] == pytest.approx(float(value), rel=1e-4)  # in the target's units
    assert too_short[0] == 400 and too_short[1]["error"].startswith('"input" has shape [9]; expected [10]')


def load_best(workdir: Path) -> torch.nn.Module:
    from {{ cookiecutter.package_name }}.model import Regressor

    (best,) = runs(workdir)[0].glob("checkpoints/best-*.ckpt")
    return Regressor.load_from_checkpoint(best, map_location="cpu").eval()


def test_batch_size_auto_chooses_a_size_trains_with_it_and_saves_it(tmp_path):
    main_py(tmp_path, "fit", "--data.batch_size=auto", "--trainer.max_epochs=2")
    saved = yaml.safe_load((runs(tmp_path)[0] / "config.yaml").read_text())
    batch_size = saved["data"]["init_args"]["batch_size"]  # the run's config names the DataModule class
    assert isinstance(batch_size, int) and batch_size >= 1


# A run of 20 steps (9 an epoch), last.ckpt every 5 steps, the signal sent by the run itself at step 12.
RESUMABLE = ("--trainer.max_epochs=-1", "--trainer.max_steps=20", "--last_checkpoint.every_n_train_steps=5")


def signal_at(step: int, signum: int) -> tuple[str, ...]:
    return (
        "--trainer.callbacks+=faults.SignalAt",  # tests/kit/faults.py
        f"--trainer.callbacks.step={step}",
        f"--trainer.callbacks.signum={signum}",
    )


def last_state(workdir: Path) -> dict:
    (last,) = workdir.glob("logs/lightning_logs/version_0/checkpoints/last.ckpt")
    return torch.load(last, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """last.ckpt of the same run never stopped."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    main_py(workdir, "fit", *RESUMABLE)
    return last_state(workdir)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "saved_step"), [(signal.SIGTERM, 12), (signal.SIGKILL, 10)], ids=["SIGTERM", "SIGKILL"]
)
def test_a_stopped_run_resumes_to_the_same_weights(tmp_path, uninterrupted, signum, saved_step):
    stopped = main_py_process(tmp_path, "fit", *RESUMABLE, *signal_at(12, int(signum)), *QUIET)
    assert stopped.returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL), stopped.stderr[
        -2000:
    ]
    assert last_state(tmp_path)["global_step"] == saved_step
    main_py(tmp_path, "fit", *RESUMABLE, "--ckpt_path=last")
    resumed = last_state(tmp_path)
    assert resumed["global_step"] == uninterrupted["global_step"] == 20
    for name, tensor in uninterrupted["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), f"{name} differs after the resume"


@pytest.mark.slow
def test_a_sweep_minimises_the_checkpoint_metric_and_its_best_config_reruns(tmp_path):
    optuna = extra("optuna", "sweep")
    space = {
        "seed": 0,
        "pruner": {"type": "none"},
        "params": {"optimizer.init_args.lr": {"type": "categorical", "choices": [1.0e-6, 3.0e-3]}},
    }
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    sweep = main_py_process(
        tmp_path,
        "sweep",
        "--space=space.yaml",
        "--n_trials=3",
        "--trainer.max_epochs=3",
        "--lr_scheduler=null",
    )
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    folder = tmp_path / "logs" / "sweeps" / "sweep"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "journal.log"))
    )
    study = optuna.load_study(study_name="sweep", storage=storage)
    assert study.direction.name == "MINIMIZE"  # val/mse, the checkpoint's monitor
    assert study.best_trial.params["optimizer.init_args.lr"] == 3.0e-3  # 1e-6 learns nothing
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["optimizer"]["init_args"]["lr"] == 3.0e-3
    main_py(tmp_path, "fit", "-c", str(folder / "best.yaml"))


def test_the_csv_tracker_records_the_regression_metrics(tmp_path):
    main_py(
        tmp_path,
        "fit",
        "-c",
        str(PROJECT_ROOT / "configs" / "loggers" / "csv.yaml"),
        "--trainer.max_epochs=2",
    )
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    with metrics.open() as file:
        columns = set(next(csv.reader(file)))
    assert {"val/mse", "val/mae", "val/r2", "train/loss"} <= columns


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fit", "--model.network.dropout=1"), "--model.network.dropout must lie in [0, 1), got 1.0."),
        (("fit", "--data.data_path=nowhere.csv"), "data file nowhere.csv does not exist"),
        (
            ("fit", "--data.target_column=price"),
            "--data.target_column names the target of a --data.data_path file",
        ),
        (
            ("predict", "--data.predict_path=rows.csv"),
            "predict file rows.csv lacks the feature column(s) sex",
        ),
    ],
)
def test_mistakes_are_refused_in_one_line_before_anything_is_written(tmp_path, args, message):
    write_rows(tmp_path / "rows.csv", ["age", "bmi"], np.ones((2, 2)))
    result = main_py_process(tmp_path, *args)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()
