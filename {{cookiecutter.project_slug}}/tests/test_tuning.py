"""`--data.batch_size=auto`: the search alone, inside a run, under DDP and on a GPU.

Out of memory is simulated on the CPU: the network raises torch.OutOfMemoryError on batches above
a limit, after its forward pass (as a real failure halfway through a step would). Run as
`python -m test_tuning ARGS`, this file is `main.py` with a limit per DDP rank, read from
FAKE_OOM_ABOVE (e.g. "500,200"); Lightning starts the other ranks with the same command.
"""

import copy
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import yaml
from torch import Tensor

from conftest import MAIN, PROJECT_ROOT, requires_gpus, tensorboard_scalars
from {{ cookiecutter.package_name }}.cli import cli_main
from {{ cookiecutter.package_name }}.data import DigitsDataModule
from {{ cookiecutter.package_name }}.kit import tuning
from {{ cookiecutter.package_name }}.kit.tuning import BatchSizeTuner, largest_fitting
from {{ cookiecutter.package_name }}.model import Classifier
from {{ cookiecutter.package_name }}.network import ConvNet

QUICK = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")
DDP_AUTO = (
    *("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"),
    *("--data.batch_size=auto", "--trainer.max_epochs=1", *QUICK),
    "--trainer.callbacks+=test_tuning.TrainedWith",  # each rank reports what it trained with
)
TIMEOUT_S = 180


def out_of_memory_above(limits: Sequence[int]) -> Callable[[ConvNet, Tensor], Tensor]:
    """A `ConvNet.forward` that runs, then raises OutOfMemoryError if the batch is above limits[rank]."""
    real_forward = ConvNet.forward

    def forward(self: ConvNet, images: Tensor) -> Tensor:
        logits = real_forward(self, images)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if images.shape[0] > limits[rank] and not torch.jit.is_tracing():  # not when drawing the graph
            raise torch.OutOfMemoryError(f"simulated: batch of {images.shape[0]} above {limits[rank]}")
        return logits

    return forward


@pytest.fixture
def memory_limit(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    return lambda limit: monkeypatch.setattr(ConvNet, "forward", out_of_memory_above([limit]))


class Trainable(Classifier):
    """The example model with the optimizer the CLI would build for it (AdamW, lr 1e-3)."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Snapshot(L.Callback):
    """Records at the start of fit what the search must leave exactly as it found it."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.batch_size = trainer.datamodule.batch_size
        self.weights = {name: tensor.clone() for name, tensor in pl_module.state_dict().items()}
        self.optimizer = copy.deepcopy(trainer.optimizers[0].state_dict())
        self.rng = [torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()]
        if pl_module.device.type == "cuda":
            self.rng.append(torch.cuda.get_rng_state(pl_module.device))
            self.gpu_memory = torch.cuda.memory_reserved(pl_module.device)


def fit_briefly(datamodule: DigitsDataModule, tuner: BatchSizeTuner) -> tuple[Snapshot, Snapshot]:
    """One training step with `tuner`; the snapshots taken just before and after it runs."""
    before, after = Snapshot(), Snapshot()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[before, tuner, after],
    )
    trainer.fit(Trainable(ConvNet((1, 8, 8), 10, width=8, hidden_size=32)), datamodule=datamodule)
    return before, after


def assert_untouched(before: Snapshot, after: Snapshot) -> None:
    assert before.weights.keys() == after.weights.keys()
    for name, weight in before.weights.items():  # BatchNorm's running stats included
        assert torch.equal(weight, after.weights[name]), f"{name} changed"
    assert after.optimizer == before.optimizer, "the optimizer state changed"
    assert torch.equal(before.rng[0], after.rng[0]) and np.array_equal(before.rng[1], after.rng[1])
    assert before.rng[2] == after.rng[2]
    if len(before.rng) > 3:
        assert torch.equal(before.rng[3], after.rng[3]), "the CUDA generator moved"


# --- The search on its own ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "cap", "mode", "expected"),
    [
        (300, 1000, "binsearch", 300),
        (300, 1000, "power", 256),
        (5000, 1000, "binsearch", 1000),  # memory is no limit: the cap, in one trial
        (1, 1000, "power", 1),
        (0, 1000, "binsearch", 0),
        (999, 1000, "binsearch", 999),
    ],
)
def test_search_finds_the_largest_size_that_fits(limit, cap, mode, expected):
    tried: list[int] = []

    def fits(size: int) -> bool:
        tried.append(size)
        return size <= limit

    assert largest_fitting(fits, cap, mode) == expected
    assert max(tried) <= cap and len(tried) <= 2 * cap.bit_length()
    if limit >= cap:
        assert tried == [cap]


def test_search_leaves_weights_optimizer_and_random_state_as_they_were(memory_limit):
    memory_limit(40)  # also fails trials halfway through a step, after BatchNorm has updated
    before, after = fit_briefly(DigitsDataModule(batch_size="auto"), BatchSizeTuner(max_batch_size=64))
    assert before.batch_size == "auto" and after.batch_size == 36  # 40 fit, less the 10% margin
    assert_untouched(before, after)


@pytest.mark.parametrize(("mode", "expected"), [("binsearch", 45), ("power", 28)])
def test_out_of_memory_caps_the_batch_size(memory_limit, mode, expected):
    memory_limit(50)
    _, after = fit_briefly(DigitsDataModule(batch_size="auto"), BatchSizeTuner(mode=mode, max_batch_size=512))
    assert after.batch_size == expected  # binsearch: 50 x 0.9; power: 32 x 0.9


def test_a_fixed_batch_size_is_not_tuned_but_can_scale_the_learning_rate(monkeypatch):
    monkeypatch.setattr(tuning, "largest_fitting", lambda *args: pytest.fail("searched a fixed batch size"))
    datamodule = DigitsDataModule(batch_size=32)
    fit_briefly(datamodule, BatchSizeTuner(scale_lr="linear", reference_batch_size=64))
    assert datamodule.batch_size == 32
    assert datamodule.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-3 * 32 / 64)


def test_bad_batch_sizes_and_settings_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="positive integer or 'auto', got 'big'"):
        DigitsDataModule(batch_size="big")
    datamodule = DigitsDataModule(batch_size="auto")
    datamodule.setup("test")
    with pytest.raises(ValueError, match=r"resolved only by `fit`.*Pass a number"):
        datamodule.test_dataloader()
    with pytest.raises(ValueError, match="margin must lie in"):
        BatchSizeTuner(margin=1.0)


# --- Inside a run ---------------------------------------------------------------------------


def tensorboard_hparams(run_dir: Path) -> dict[str, Any]:
    """The hyperparameters TensorBoard's HPARAMS tab shows for a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for content in accumulator.PluginTagToContent("hparams").values():
            data = HParamsPluginData.FromString(content)
            if data.HasField("session_start_info"):
                values = data.session_start_info.hparams
                return {name: getattr(value, value.WhichOneof("kind")) for name, value in values.items()}
    return {}


def test_auto_trains_with_the_size_found_and_the_config_reruns_it(run_main, tmp_path, capsys, memory_limit):
    memory_limit(300)
    fit = ("fit", "--trainer.max_epochs=2", "--trainer.log_every_n_steps=1", *QUICK)
    run_main(*fit, "--data.batch_size=auto", "--tuner.scale_lr=linear", "--tuner.steps_per_trial=2")
    assert "batch_size=auto: training with 270 per device" in capsys.readouterr().out
    (run_dir,) = sorted((tmp_path / "logs").glob("*/version_*"))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["batch_size"] == 270
    assert tensorboard_hparams(run_dir)["batch_size"] == 270
    tuned = tensorboard_scalars(run_dir)
    assert tuned["lr-AdamW"][0] == pytest.approx(0.002 * 270 / 64)
    assert len(tuned["train/loss"]) == 2 * 5  # 1,259 training samples in batches of 270: 5 per epoch

    # The saved config reruns the same run: no search, the same learning rate, the same losses.
    run_main("fit", "-c", str(run_dir / "config.yaml"))
    assert "batch_size=auto" not in capsys.readouterr().out
    rerun = tensorboard_scalars(sorted((tmp_path / "logs").glob("*/version_*"))[-1])
    assert rerun["lr-AdamW"] == tuned["lr-AdamW"] and rerun["train/loss"] == tuned["train/loss"]


# --- Under DDP: two CPU processes ----------------------------------------------------------


class TrainedWith(L.Callback):
    """Each DDP process writes the batch size it trained with and its step count to rank<N>.json."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        report = {"batch_size": trainer.datamodule.batch_size, "steps": trainer.global_step}
        Path(f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


def fit_with_ddp(folder: Path, command: Sequence[str], fake_oom_above: str | None = None) -> str:
    """Run `command fit` with DDP on 2 CPU processes and batch_size=auto; its output. Fails on a hang."""
    paths = [str(PROJECT_ROOT / "src"), str(PROJECT_ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "PYTHONUNBUFFERED": "1"}
    if fake_oom_above:
        env["FAKE_OOM_ABOVE"] = fake_oom_above
    process = subprocess.Popen(
        [sys.executable, *command, "fit", *DDP_AUTO],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # one process group: a hang kills both ranks
    )
    try:
        output = process.communicate(timeout=TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"DDP run with batch_size=auto still running after {TIMEOUT_S} s: the ranks hang")
    assert process.returncode == 0, output[-4000:]
    return output


def trained_with(folder: Path) -> list[dict[str, int]]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.slow
def test_ddp_ranks_tune_then_train_with_one_batch_size(tmp_path):
    output = fit_with_ddp(tmp_path, [str(MAIN)])
    # On a CPU nothing runs out of memory: each rank's share of the training set is the limit.
    assert "batch_size=auto on rank 1: 630 fits" in output
    assert "training with 630 per device, the smallest over 2 ranks" in output
    assert trained_with(tmp_path) == [{"batch_size": 630, "steps": 1}] * 2
    (config,) = tmp_path.glob("logs/*/version_*/config.yaml")
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == 630


@pytest.mark.slow
def test_ddp_ranks_with_different_memory_settle_on_the_smaller(tmp_path):
    output = fit_with_ddp(tmp_path, ["-m", "test_tuning"], fake_oom_above="500,200")
    assert "batch_size=auto on rank 0: 500 fits" in output and "batch_size=auto on rank 1: 200 fits" in output
    assert "training with 180 per device, the smallest over 2 ranks" in output  # 200, less 10%
    assert trained_with(tmp_path) == [{"batch_size": 180, "steps": 4}] * 2  # 630 per rank / 180


# --- On a GPU ---------------------------------------------------------------------------------

MIB_PER_SAMPLE = 256


class MemoryHungry(Trainable):
    """Holds MIB_PER_SAMPLE of GPU memory per sample during a step: runs out of memory for real."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        ballast = torch.zeros(len(batch[0]), MIB_PER_SAMPLE * 2**20, dtype=torch.uint8, device=self.device)
        return super().training_step(batch, batch_idx) + ballast[0, 0]


@requires_gpus(1)
def test_on_a_gpu_real_out_of_memory_is_caught_and_cleaned_up():
    free, _ = torch.cuda.mem_get_info()
    limit = free // (MIB_PER_SAMPLE * 2**20)  # samples whose ballast fits in the free memory
    datamodule = DigitsDataModule(batch_size="auto")
    before, after = Snapshot(), Snapshot()
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        max_steps=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[before, BatchSizeTuner(), after],
    )
    trainer.fit(MemoryHungry(ConvNet((1, 8, 8), 10)), datamodule=datamodule)
    assert 0.7 * limit <= datamodule.batch_size <= 0.9 * limit
    assert_untouched(before, after)
    assert after.gpu_memory <= before.gpu_memory + 2**30, "the failed trials' memory was not released"


if __name__ == "__main__":  # `python -m test_tuning ARGS`: main.py, out of memory above FAKE_OOM_ABOVE
    # Not runpy.run_path(main.py): it renames the script, and the DDP launcher would start main.py.
    ConvNet.forward = out_of_memory_above([int(limit) for limit in os.environ["FAKE_OOM_ABOVE"].split(",")])
    cli_main()
