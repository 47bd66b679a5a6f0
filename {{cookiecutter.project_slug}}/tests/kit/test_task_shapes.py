"""Each kit capability on each of the fixtures' task shapes: tuple classification (`blobs`),
tuple regression (`regression`) and dict batches with two named inputs (`named`)."""

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from {{ cookiecutter.package_name }}.kit.export import FORMATS

from kit_fixtures import CLASSES, EXTRA, FEATURES, FIXTURES, SAMPLES
from kit_testing import extra, run_fixtures

DDP = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
# What each fixture's predict_step returns, as predictions.csv's header.
HEADERS = {
    "blobs": ["index", "predicted", "probabilities_0", "probabilities_1", "probabilities_2"],
    "regression": ["index", "prediction"],
    "named": ["index", "predicted", "target"],
}
MONITOR = {"regression": ("--checkpoint.monitor=val/mse",)}


def fit(folder: Path, fixture: str, *flags: str) -> None:
    folder.mkdir(exist_ok=True)
    result = run_fixtures(folder, f"--fixture={fixture}", "fit", *MONITOR.get(fixture, ()), *flags)
    assert result.returncode == 0, result.stderr[-3000:]


def predictions(folder: Path, fixture: str, *flags: str) -> list[list[str]]:
    result = run_fixtures(folder, f"--fixture={fixture}", "predict", "--ckpt_path=last", *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    path = max(folder.rglob("predictions.csv"), key=lambda path: path.stat().st_mtime)
    with path.open(newline="") as file:
        return list(csv.reader(file))


def test_the_fixtures_cover_three_task_shapes():
    assert set(FIXTURES) == set(HEADERS)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_each_task_shape_tunes_its_batch_size_trains_and_predicts(tmp_path, fixture):
    fit(tmp_path, fixture, "--data.batch_size=auto", "--trainer.max_epochs=1")
    (config,) = tmp_path.rglob("config.yaml")
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == SAMPLES, "tuples and dicts alike"
    header, *rows = predictions(tmp_path, fixture, "--data.batch_size=16")
    assert header == HEADERS[fixture]
    assert [int(row[0]) for row in rows] == list(range(SAMPLES // 4)), "one row a sample, in order"
    assert all(len(row) == len(header) and all(row) for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["regression", "named"])
def test_ddp_ranks_predictions_merge_into_the_one_device_file(tmp_path, fixture):
    fit(tmp_path, fixture, "--trainer.max_epochs=1")
    alone = predictions(tmp_path, fixture)
    assert predictions(tmp_path, fixture, *DDP) == alone


@pytest.mark.slow
def test_ddp_ranks_tune_one_batch_size_from_dict_batches(tmp_path):
    fit(tmp_path, "named", *DDP, "--data.batch_size=auto", "--trainer.max_epochs=1", "--trainer.max_steps=1")
    (config,) = tmp_path.rglob("config.yaml")
    # On a CPU nothing runs out of memory: each rank's share of the training samples is the limit.
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == SAMPLES // 2


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["regression", "named"])
def test_each_task_shape_resumes_exactly_after_sigterm(tmp_path, fixture):
    steps = ("--trainer.max_steps=24", "--trainer.max_epochs=-1")  # 15 batches an epoch
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    fit(straight, fixture, *steps)
    stopped.mkdir()
    signal_at = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=18")
    flags = (f"--fixture={fixture}", "fit", *MONITOR.get(fixture, ()), *steps)
    interrupted = run_fixtures(stopped, *flags, *signal_at)
    assert interrupted.returncode == 143 and last_checkpoint(stopped)["global_step"] == 18, interrupted.stderr
    fit(stopped, fixture, *steps, "--ckpt_path=last")
    first, second = last_checkpoint(straight), last_checkpoint(stopped)
    assert second["global_step"] == 24
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), f"{name} differs after the resume"


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["regression", "named"])
def test_each_task_shape_exports_from_a_real_batch_with_parity(tmp_path, fixture):
    """...and serve reads the export's inputs back from its metadata, by name."""
    serving = extra("{{ cookiecutter.package_name }}.kit.serving", "serve")
    fit(tmp_path, fixture, "--trainer.max_epochs=1")
    for format, suffix in FORMATS.items():
        output = tmp_path / f"model{suffix}"
        flags = ("--ckpt_path=last", f"--format={format}", f"--output={output}")
        result = run_fixtures(tmp_path, f"--fixture={fixture}", "export", *flags)
        assert result.returncode == 0, result.stderr[-3000:]
        metadata = json.loads(output.with_name(output.name + ".json").read_text())
        names = {"regression": ["input"], "named": ["x", "extra"]}[fixture]
        assert [entry["name"] for entry in metadata["inputs"]] == names, "forward's inputs, not the target"
        served = [(spec.name, spec.shape) for spec in map(serving.InputSpec.described, metadata["inputs"])]
        shapes = {"input": (FEATURES,), "x": (FEATURES,), "extra": (EXTRA,)}
        assert served == [(name, shapes[name]) for name in names], "what serve reads from the metadata"
        assert metadata["output"]["shape"] == [None, {"regression": 1, "named": 3}[fixture]]
        assert metadata.get("num_classes") == {"regression": None, "named": CLASSES}[fixture], "declared only"
        assert metadata["parity"]["max_abs_error"] <= 1e-4
