"""The kit's trackers (kit/trackers.py): what each receives, read back with its own client.

One short training run of the kit's fixtures per tracker, shared by the tests that read it;
offline throughout (MLflow's local SQLite store, W&B's offline run folder, the CSV file). The
loggers are configured as the project's presets (configs/loggers/) do: TensorBoard first, with
`save_dir: logs`.
"""

import csv
import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.core.saving import load_hparams_from_yaml

from {{ cookiecutter.package_name }}.kit.cli import EXIT_STOPPED
from {{ cookiecutter.package_name }}.kit.trackers import TRACKERS_FILE

from kit_fixtures import FixtureCLI, run
from kit_testing import QUICK, extra, run_fixtures

KIT = "{{ cookiecutter.package_name }}.kit"
# Each tracker beside TensorBoard, as the presets in configs/loggers/ configure them.
LOGGERS = {
    "mlflow": {
        "class_path": f"{KIT}.trackers.MLFlowLogger",
        "init_args": {"experiment_name": "blobs", "log_model": True},
    },
    "wandb": {
        "class_path": f"{KIT}.trackers.WandbLogger",
        "init_args": {"project": "blobs", "save_dir": "logs"},
    },
    "csv": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "logs"}},
}
# Two short epochs of 3 training batches; every step logged, so step numbers can be compared.
SHORT = (
    "--trainer.max_epochs=2",
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=2",
    "--trainer.limit_test_batches=2",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)


def preset(name: str, folder: Path) -> str:
    """A config file in `folder` naming TensorBoard and the `name` logger, as a preset does."""
    tensorboard = {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "logs"},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"logger": [tensorboard, LOGGERS[name]]}}))
    return str(path)


def in_folder(folder: Path, *args: str) -> None:
    """`python -m kit_fixtures ARGS` in this process, in `folder` (the loggers write to ./logs)."""
    cwd, uri = Path.cwd(), os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.chdir(folder)
    try:
        run(FixtureCLI, [*args, *QUICK])
    finally:
        os.chdir(cwd)
        # mlflow.set_tracking_uri() sets it for this process; put back what was there before.
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        if uri is not None:
            os.environ["MLFLOW_TRACKING_URI"] = uri


def run_folders(folder: Path) -> list[Path]:
    return sorted((folder / "logs" / "lightning_logs").glob("version_*"))


# MLflow --------------------------------------------------------------------------------------


def mlflow_runs(folder: Path) -> tuple[Any, list[Any]]:
    """MLflow's client on the project's local store, and every run in it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(folder / 'mlflow.db').resolve()}")  # under default_root_dir
    experiments = [e.experiment_id for e in client.search_experiments() if e.name != "Default"]
    return client, client.search_runs(experiments)


def steps(client: Any, run_id: str, metric: str) -> list[int]:
    return [m.step for m in sorted(client.get_metric_history(run_id, metric), key=lambda m: m.timestamp)]


DDP = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
NO_SERVER = {"MLFLOW_TRACKING_URI": ""}  # the local store, whatever this machine's environment says


@pytest.fixture(scope="module")
def mlflow_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`fit` on two DDP ranks, then `validate --ckpt_path=best`, with TensorBoard and MLflow."""
    extra("mlflow", "mlflow")
    folder = tmp_path_factory.mktemp("mlflow")
    result = run_fixtures(folder, "fit", "-c", preset("mlflow", folder), *SHORT, *DDP, env=NO_SERVER)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Creating initial MLflow database tables" not in result.stdout + result.stderr, "a line to ignore"
    in_folder(folder, "validate", "-c", preset("mlflow", folder), "--ckpt_path=best", *SHORT)
    return folder


@pytest.mark.slow
def test_ddp_on_cpu_creates_one_mlflow_run_and_evaluation_adds_to_it(mlflow_trained):
    client, runs = mlflow_runs(mlflow_trained)
    (run,) = runs  # two ranks, then `validate`: one run
    assert run.data.params["trainer.devices"] == "2" and run.info.status == "FINISHED"
    # Two epochs' validation, then the evaluation's, in the same run.
    assert len(client.get_metric_history(run.info.run_id, "val/acc")) == 3
    (run_dir, *_) = run_folders(mlflow_trained)
    assert json.loads((run_dir / TRACKERS_FILE).read_text())["MLFlowLogger"]["run_id"] == run.info.run_id


@pytest.mark.slow
def test_mlflow_run_holds_the_config_metrics_and_files(mlflow_trained):
    client, (run,) = mlflow_runs(mlflow_trained)
    params = run.data.params
    # The whole config, flattened, once: no second copy under Lightning's hparams names.
    assert params["trainer.max_epochs"] == "2"
    assert params["model.hidden"] == "16"
    assert params["data.batch_size"] == "16"
    assert "hidden" not in params, "Lightning's hparams not logged a second time"
    assert {"train/loss", "val/acc", "val/loss"} <= run.data.metrics.keys()
    assert steps(client, run.info.run_id, "train/loss") == list(range(6))  # every step, by step
    artifacts = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
    (run_dir, *_) = run_folders(mlflow_trained)
    (best,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    assert {"config.yaml", best.stem} <= artifacts
    saved = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config.yaml")).read_text())
    assert saved["trainer"]["max_epochs"] == 2


@pytest.mark.slow
def test_checkpoints_stay_in_the_tensorboard_run_folder_with_mlflow(mlflow_trained):
    (run_dir, *_) = run_folders(mlflow_trained)
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir())[-1] == "last.ckpt"
    assert list(run_dir.glob("events.out.tfevents.*"))
    # The only checkpoint files outside that folder are MLflow's artifact copies of the best one.
    files = [p for p in (mlflow_trained / "logs").rglob("*.ckpt") if "mlartifacts" not in p.parts]
    assert {path.parent for path in files} == {run_dir / "checkpoints"}


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_resumes_into_the_same_mlflow_run(tmp_path):
    extra("mlflow", "mlflow")
    flags = ("fit", "-c", preset("mlflow", tmp_path), *SHORT[1:], "--trainer.max_epochs=3")
    # A real SIGTERM, to this process, at step 4: the preempted job's last.ckpt, exit code 143.
    stop = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=4")
    with pytest.raises(SystemExit) as stopped:
        in_folder(tmp_path, *flags, *stop)
    assert stopped.value.code == EXIT_STOPPED
    client, runs = mlflow_runs(tmp_path)
    assert [run.info.status for run in runs] == ["FAILED"]
    params_before = runs[0].data.params

    in_folder(tmp_path, *flags, "--ckpt_path=last")  # as the requeued job would
    client, runs = mlflow_runs(tmp_path)
    (run,) = runs  # the same run, continued
    assert run.info.status == "FINISHED"
    # Steps go on from where the stop left them: none repeated, none restarted from 0.
    assert steps(client, run.info.run_id, "train/loss") == list(range(9))
    assert len(client.get_metric_history(run.info.run_id, "val/acc")) == 3
    assert run.data.params == params_before, "params logged once, at the start"
    assert len(run_folders(tmp_path)) == 1


@pytest.mark.slow
def test_without_a_logger_best_and_last_find_the_checkpoints_where_they_always_are(tmp_path):
    off = ("--trainer.logger=false", "--trainer.default_root_dir=logs")
    in_folder(tmp_path, "fit", *off, *SHORT)
    (run_dir,) = run_folders(tmp_path)  # the layout of the default logger, without its files
    assert {path.name for path in (run_dir / "checkpoints").iterdir()} >= {"last.ckpt"}
    assert not list(run_dir.glob("events.out.tfevents.*"))
    in_folder(tmp_path, "fit", *off, *SHORT[1:], "--trainer.max_epochs=3", "--ckpt_path=last")
    assert run_folders(tmp_path) == [run_dir], "resumed into the same folder"
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 9
    in_folder(tmp_path, "validate", *off, "--ckpt_path=best", *SHORT)  # found: no error


# CSV -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_csv_and_tensorboard_write_one_run_folder(tmp_path):
    folder = tmp_path
    in_folder(folder, "fit", "-c", preset("csv", folder), *SHORT)
    (run_dir,) = run_folders(folder)  # one version folder for both loggers
    assert list(run_dir.glob("events.out.tfevents.*"))
    with (run_dir / "metrics.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert {"step", "epoch", "train/loss", "val/acc", "val/loss"} <= rows[0].keys()
    assert sorted({int(row["step"]) for row in rows if row["train/loss"]}) == list(range(6))
    assert len([row for row in rows if row["val/acc"]]) == 2
    assert load_hparams_from_yaml(run_dir / "hparams.yaml")["hidden"] == 16
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


# Weights & Biases ----------------------------------------------------------------------------


def wandb_records(run_file: Path) -> Iterator[Any]:
    """The records of a W&B run file (`run-<id>.wandb`): W&B's protobuf `Record`s, framed as a
    LevelDB log (32 KiB blocks; each chunk: CRC, length, type) after a 7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, "not a W&B run file"
    block, position, pending = 32 * 1024, 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


@pytest.mark.slow
def test_wandb_offline_run_holds_the_config_metrics_and_files(tmp_path, monkeypatch):
    wandb = extra("wandb", "wandb")

    folder = tmp_path
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    try:
        in_folder(folder, "fit", "-c", preset("wandb", folder), *SHORT)
    finally:
        wandb.teardown()  # what a process of its own does as it ends: finish, wait for the files
    (offline_run,) = (folder / "logs" / "wandb").glob("offline-run-*")
    (run_file,) = offline_run.glob("run-*.wandb")
    history, config, run_ids = [], {}, []
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_ids.append(record.run.run_id)
        elif kind == "history":
            history.append({key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "config":
            config.update({key(item): json.loads(item.value_json) for item in record.config.update})
    (run_dir,) = run_folders(folder)
    assert set(run_ids) == {json.loads((run_dir / TRACKERS_FILE).read_text())["WandbLogger"]["id"]}
    assert config["trainer.max_epochs"] == 2 and config["model.hidden"] == 16
    assert "hidden" not in config, "Lightning's hparams not logged a second time"
    logged = [row for row in history if "train/loss" in row]
    assert [row["trainer/global_step"] for row in logged] == list(range(6))
    assert len([row for row in history if "val/acc" in row]) == 2
    saved = yaml.safe_load((offline_run / "files" / "lightning_config.yaml").read_text())
    assert saved["trainer"]["max_epochs"] == 2


# Mistakes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "module"), [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_a_tracker_without_its_package_names_the_install_command(name, module, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # `import mlflow` now fails, as if not installed
    with pytest.raises(SystemExit) as exit_info:
        in_folder(tmp_path, "fit", "-c", preset(name, tmp_path), *SHORT)
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and line.endswith(f'needs {module}: pip install -e ".[{name}]"')
