"""DDP launched the ways users launch it: Lightning's own launcher, torchrun, two torchrun "nodes".

DDP cannot run inside pytest's process, so each test runs `main.py` in new processes. On the CPU
they talk over gloo instead of NCCL; everything else (launch, data sharding, metric sync,
rank-0 logging and checkpoints) is the code path of multi-GPU DDP.
"""

import csv
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from {{ cookiecutter.package_name }}.data import DigitsDataModule

from conftest import MAIN, PROJECT_ROOT, main_py_environment, requires_gpus, tensorboard_scalars

EPOCHS = 2
SHORT = (
    f"--trainer.max_epochs={EPOCHS}",
    f"--lr_scheduler.init_args.T_max={EPOCHS}",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    # Each process writes what it saw to rank<N>-<stage>.json (RankReport, below).
    "--trainer.callbacks+=test_distributed.RankReport",
)
DDP_CPU = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
TIMEOUT_S = 180


class RankReport(L.Callback):
    """What one DDP process saw: its rank, the world, its batches and the metrics it computed."""

    def __init__(self) -> None:
        self.train_batches = 0
        self.val_acc: list[float] = []

    def on_train_batch_end(self, *args: Any) -> None:
        self.train_batches += 1

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.val_acc.append(float(trainer.callback_metrics["val/acc"]))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        report = {
            "global_rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "node_rank": trainer.node_rank,
            "device": str(pl_module.device),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "train_batches": self.train_batches,
            "val_acc": self.val_acc,
            "test_acc": float(trainer.callback_metrics.get("test/acc", float("nan"))),
        }
        Path(f"rank{trainer.global_rank}-{trainer.state.fn.value}.json").write_text(json.dumps(report))


def rank_reports(folder: Path, stage: str) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob(f"rank*-{stage}.json"))]


def run(folder: Path, *command: str, env: dict[str, str] | None = None) -> str:
    """Run a command in `folder`; its output, or a failure that shows that output."""
    result = subprocess.run(
        command,
        cwd=folder,
        env=env or main_py_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} failed ({result.returncode}):\n{output[-4000:]}"
    return output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_batches_per_rank(world_size: int) -> int:
    """Batches one rank trains on per epoch when `world_size` ranks share the training split."""
    datamodule = DigitsDataModule()
    datamodule.setup("fit")
    samples_per_rank = math.ceil(len(datamodule.train_set) / world_size)
    return math.ceil(samples_per_rank / datamodule.batch_size)


def assert_one_run_of_two_ranks(folder: Path, output: str) -> None:
    """Two processes trained together as one run: shared data, synced metrics, one set of files."""
    reports = rank_reports(folder, "fit")
    assert [(r["global_rank"], r["world_size"]) for r in reports] == [(0, 2), (1, 2)], output[-3000:]
    # Each rank trained on its own half of every epoch, so it ran half the batches.
    assert reports[0]["train_batches"] == reports[1]["train_batches"] == EPOCHS * train_batches_per_rank(2)
    # torchmetrics synced validation across ranks: both computed the same accuracy.
    assert len(reports[0]["val_acc"]) == EPOCHS and reports[0]["val_acc"] == reports[1]["val_acc"]

    # Rank 0 alone logged and saved: one run folder, one event file, one config, one of each checkpoint.
    (run_dir,) = (folder / "logs").glob("*/version_*")
    assert run_dir.name == "version_0"
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert (run_dir / "config.yaml").is_file()
    checkpoints = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    assert len(checkpoints) == 2 and checkpoints[0].startswith("best-") and checkpoints[1] == "last.ckpt"
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == EPOCHS * train_batches_per_rank(2)

    scalars = tensorboard_scalars(run_dir)
    assert scalars["val/acc"] == pytest.approx(reports[0]["val_acc"])
    assert scalars["val/acc_best"][-1] == pytest.approx(max(scalars["val/acc"]))
    assert "sync_dist" not in output, "epoch metrics must be logged as synced torchmetrics objects"


@pytest.mark.slow
def test_ddp_on_cpu_trains_two_ranks_as_one_run(tmp_path):
    output = run(tmp_path, sys.executable, str(MAIN), "fit", *DDP_CPU, *SHORT)
    assert "Starting with 2 processes" in output
    assert_one_run_of_two_ranks(tmp_path, output)


def predictions(folder: Path) -> list[dict[str, str]]:
    (path,) = (folder / "logs").glob("*/version_*/predictions.csv")
    with path.open() as file:
        return list(csv.DictReader(file))


@pytest.mark.slow
def test_test_and_predict_on_two_ranks_count_every_sample_once_as_one_device_does(tmp_path):
    """Test metrics and predictions do not depend on the device count (no padding); `test` under
    DDP reports one accuracy over all ranks, and logs it once. (`validate`: tests/kit.)"""
    run(tmp_path, sys.executable, str(MAIN), "fit", "--trainer.max_steps=5", *SHORT)
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    single, double = tmp_path / "one", tmp_path / "two"
    for folder, flags in ((single, ("--trainer.devices=1",)), (double, DDP_CPU)):
        folder.mkdir()
        for stage in ("test", "predict"):
            run(folder, sys.executable, str(MAIN), stage, f"--ckpt_path={checkpoint}", *flags, *SHORT)
    one_device, two_ranks = rank_reports(single, "test"), rank_reports(double, "test")
    assert [r["global_rank"] for r in two_ranks] == [0, 1]
    assert two_ranks[0]["test_acc"] == two_ranks[1]["test_acc"]
    assert one_device[0]["test_acc"] == pytest.approx(two_ranks[0]["test_acc"], abs=1e-6)
    runs = (double / "logs").glob("*/version_*")
    (run_dir,) = [path for path in runs if not (path / "predictions.csv").exists()]  # test's, not predict's
    assert tensorboard_scalars(run_dir)["test/acc"] == pytest.approx([two_ranks[0]["test_acc"]])
    rows = predictions(double)
    assert [int(row["index"]) for row in rows] == list(range(len(rows))), "each test sample once, in order"
    assert rows == predictions(single)


@pytest.mark.slow
def test_torchrun_without_trainer_flags_joins_its_processes_into_one_run(tmp_path):
    env = {**main_py_environment(), "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port())}
    torchrun = str(PROJECT_ROOT / "scripts" / "torchrun.sh")
    output = run(tmp_path, "bash", torchrun, "fit", "--trainer.accelerator=cpu", *SHORT, env=env)
    assert "torchrun started 2 processes (2 per node on 1 node(s))" in output
    assert "--trainer.devices=2 --trainer.num_nodes=1 --trainer.strategy=ddp" in output
    assert_one_run_of_two_ranks(tmp_path, output)


@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_train_as_one_run(tmp_path):
    """Two "machines" of one process each, talking over 127.0.0.1, as on a real cluster."""
    port = str(free_port())
    torchrun = str(PROJECT_ROOT / "scripts" / "torchrun.sh")
    nodes = []
    for node_rank in (0, 1):
        env = {**main_py_environment(), "NNODES": "2", "NODE_RANK": str(node_rank), "NPROC_PER_NODE": "1"}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        command = ["bash", torchrun, "fit", "--trainer.accelerator=cpu", *SHORT]
        nodes.append(
            subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    try:
        outputs = [node.communicate(timeout=TIMEOUT_S)[0].decode() for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-4000:]
    assert "--trainer.devices=1 --trainer.num_nodes=2 --trainer.strategy=ddp" in outputs[0]
    assert [r["node_rank"] for r in rank_reports(tmp_path, "fit")] == [0, 1]
    assert_one_run_of_two_ranks(tmp_path, "\n".join(outputs))


@requires_gpus(1)
@pytest.mark.slow
def test_fit_on_one_gpu_uses_it_with_tensor_cores(tmp_path):
    run(
        tmp_path,
        sys.executable,
        str(MAIN),
        "fit",
        "-c",
        str(PROJECT_ROOT / "configs/presets/gpu.yaml"),
        *SHORT,
    )
    (report,) = rank_reports(tmp_path, "fit")
    assert report["device"] == "cuda:0"
    major, _ = torch.cuda.get_device_capability(0)
    assert report["matmul_precision"] == ("high" if major >= 8 else "highest")
    assert report["val_acc"][-1] > 0.5


@requires_gpus(2)
@pytest.mark.slow
def test_ddp_on_two_gpus_trains_as_one_run(tmp_path):
    preset = str(PROJECT_ROOT / "configs/presets/ddp.yaml")
    output = run(tmp_path, sys.executable, str(MAIN), "fit", "-c", preset, "--trainer.devices=2", *SHORT)
    assert [r["device"] for r in rank_reports(tmp_path, "fit")] == ["cuda:0", "cuda:1"]
    assert_one_run_of_two_ranks(tmp_path, output)


@pytest.mark.parametrize("script", ["torchrun.sh", "slurm.sbatch", "sweep.sbatch"])
def test_launch_scripts_are_valid_bash(script):
    subprocess.run(["bash", "-n", str(PROJECT_ROOT / "scripts" / script)], check=True)


@pytest.mark.parametrize(("restarts", "resumes"), [("0", False), ("1", True)])
def test_the_slurm_script_ends_all_tasks_on_a_failure_and_resumes_when_requeued(tmp_path, restarts, resumes):
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\necho "$@"\n')  # prints the command it was given
    srun.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_RESTART_COUNT": restarts,
    }
    script = str(PROJECT_ROOT / "scripts" / "slurm.sbatch")
    result = subprocess.run(
        ["bash", script, "--trainer.max_epochs=5"], env=env, capture_output=True, text=True
    )
    command = result.stdout.split()
    assert command[:4] == ["--kill-on-bad-exit=1", "python", "main.py", "fit"], result.stdout + result.stderr
    assert "--trainer.num_nodes=2" in command and "--trainer.devices=4" in command
    assert ("--ckpt_path=last" in command) == resumes and command[-1] == "--trainer.max_epochs=5"
