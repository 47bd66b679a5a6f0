"""The kit on a model and data set it has never seen (`kit_fixtures`): nothing of the example.

Replace the example's network, model or data, and these still pass: they are the kit's promises.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from conftest import PROJECT_ROOT
from kit_fixtures import SAMPLES

QUICK = (
    "--seed_everything=42",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)


def kit_main(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m kit_fixtures ARGS` in `workdir`: the kit's CLI around the fixtures."""
    path = [str(PROJECT_ROOT / "src"), str(PROJECT_ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-m", "kit_fixtures", *args, f"--trainer.default_root_dir={workdir}", *QUICK],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_the_kit_trains_checkpoints_and_finds_them_again_for_any_model(tmp_path):
    result = kit_main(tmp_path, "fit", "--trainer.max_epochs=3")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = (tmp_path / "lightning_logs").glob("version_*")
    names = sorted(path.name for path in (run / "checkpoints").iterdir())
    assert names[0].startswith("best-") and names[-1] == "last.ckpt", names
    best = next(key for key in last_checkpoint(tmp_path)["callbacks"] if key.startswith("BestCheckpoint"))
    assert last_checkpoint(tmp_path)["callbacks"][best]["best_model_score"] > 0.9, "the blobs are easy"

    tested = kit_main(tmp_path, "validate", "--ckpt_path=best")
    assert tested.returncode == 0 and f"Using best checkpoint: {run}" in tested.stdout, tested.stderr[-3000:]


@pytest.mark.slow
def test_the_kit_resumes_any_model_exactly_after_sigterm(tmp_path):
    steps = ("--trainer.max_steps=40", "--trainer.max_epochs=-1")  # 15 batches an epoch
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir()
    stopped.mkdir()
    assert kit_main(straight, "fit", *steps).returncode == 0
    signal_at = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=22")
    interrupted = kit_main(stopped, "fit", *steps, *signal_at)
    assert interrupted.returncode == 0 and last_checkpoint(stopped)["global_step"] == 22, interrupted.stderr
    resumed = kit_main(stopped, "fit", *steps, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    first, second = last_checkpoint(straight), last_checkpoint(stopped)
    assert second["global_step"] == 40
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), f"{name} differs after the resume"


@pytest.mark.slow
def test_the_kit_tunes_any_datamodules_batch_size(tmp_path):
    result = kit_main(tmp_path, "fit", "--data.batch_size=auto", "--trainer.max_epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    (config,) = tmp_path.rglob("config.yaml")
    # Nothing runs out of memory on a CPU: the whole training split in one batch.
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == SAMPLES


def test_the_kits_one_line_errors_need_no_example(tmp_path):
    result = kit_main(tmp_path, "validate", "--ckpt_path=last")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no last.ckpt" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_the_kit_never_imports_the_example():
    kit = PROJECT_ROOT / "src" / "{{ cookiecutter.package_name }}" / "kit"
    for module in kit.glob("*.py"):
        source = module.read_text()
        for example in ("from ..", "import {{ cookiecutter.package_name }}.", "Classifier", "DigitsDataModule"):
            assert example not in source, f"{module.name} reaches outside the kit: {example}"
