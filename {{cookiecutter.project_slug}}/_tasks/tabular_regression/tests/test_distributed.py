"""DDP on the CPU (gloo, 2 processes) with the regression example: the code path of multi-GPU DDP.

DDP cannot run inside pytest's process, so each run is `main.py` in new processes. (Launch
methods, torchrun, faults and the fault table are the kit's: tests/kit/test_ddp_faults.py.)
"""

from pathlib import Path

import pytest
import yaml

from conftest import main_py_process, requires_gpus, tensorboard_scalars

SHORT = (
    "--trainer.max_epochs=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)
DDP_CPU = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")


def run(workdir: Path, *args: str) -> str:
    result = main_py_process(workdir, *args, *SHORT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def runs(workdir: Path) -> list[Path]:
    return sorted((workdir / "logs").glob("*/version_*"), key=lambda path: int(path.name.split("_")[1]))


def test_two_processes_train_and_test_every_row_once(tmp_path):
    output = run(tmp_path, "fit", *DDP_CPU)
    assert "distributed_backend=gloo" in output and "All distributed processes registered" in output
    (fit_run,) = runs(tmp_path)
    assert len(tensorboard_scalars(fit_run)["val/r2"]) == 2  # logged once per epoch, by rank 0
    run(tmp_path, "test", "--ckpt_path=best", *DDP_CPU)
    run(tmp_path, "test", "--ckpt_path=best", "--trainer.accelerator=cpu", "--trainer.devices=1")
    assert runs(tmp_path) == [fit_run], "both tests wrote into the run they evaluated"
    two_ranks, one_device = zip(
        *(tensorboard_scalars(fit_run)[name] for name in ("test/mse", "test/r2")), strict=True
    )
    # Each test row counted once across ranks: the same MSE and R² as on one device.
    assert two_ranks == pytest.approx(one_device, rel=1e-5)


def test_batch_size_auto_under_ddp_agrees_on_one_size(tmp_path):
    run(tmp_path, "fit", *DDP_CPU, "--data.batch_size=auto")
    saved = yaml.safe_load((runs(tmp_path)[0] / "config.yaml").read_text())
    batch_size = saved["data"]["init_args"]["batch_size"]  # the run's config names the DataModule class
    assert isinstance(batch_size, int) and batch_size >= 1


@requires_gpus(2)
def test_ddp_on_two_gpus_trains(tmp_path):
    run(tmp_path, "fit", "--trainer.accelerator=gpu", "--trainer.devices=2", "--trainer.strategy=ddp")
    assert len(tensorboard_scalars(runs(tmp_path)[0])["val/r2"]) == 2
