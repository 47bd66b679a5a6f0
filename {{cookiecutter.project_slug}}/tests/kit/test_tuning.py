"""`--data.batch_size=auto`: the search alone, inside a run, under DDP and on a GPU.

On the kit's fixtures: TinyModel (with BatchNorm and dropout) on the Gaussian blobs. Out of memory
is simulated on the CPU: with FAKE_OOM_ABOVE set, TinyModel raises torch.OutOfMemoryError on
larger batches after its forward pass (see `kit_fixtures`), per DDP rank if need be.
"""

import copy
import json
import random
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import yaml
from torch import Tensor

from {{ cookiecutter.package_name }}.kit import tuning
from {{ cookiecutter.package_name }}.kit.tuning import BatchSizeTuner, largest_fitting

from kit_fixtures import LR, Blobs, TinyModel
from kit_testing import (
    QUICK,
    requires_gpus,
    run_fixtures,
    run_fixtures_here,
    tensorboard_scalars,
    tensorboard_settings,
)

DDP_AUTO = (
    *("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"),
    *("--data.batch_size=auto", "--trainer.max_epochs=1"),
    "--trainer.callbacks+=test_tuning.TrainedWith",  # each rank reports what it trained with
)


@pytest.fixture
def memory_limit(monkeypatch: pytest.MonkeyPatch):
    """`memory_limit(40)`: TinyModel runs "out of memory" on batches above 40 in this test."""
    return lambda limit: monkeypatch.setenv("FAKE_OOM_ABOVE", str(limit))


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


def fit_briefly(
    datamodule: Blobs, tuner: BatchSizeTuner, model: TinyModel | None = None
) -> tuple[Snapshot, Snapshot]:
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
    trainer.fit(model or TinyModel(), datamodule=datamodule)
    return before, after


def assert_untouched(before: Snapshot, after: Snapshot) -> None:
    assert before.weights.keys() == after.weights.keys()
    assert any("running_mean" in name for name in before.weights), "BatchNorm's running stats are checked"
    for name, weight in before.weights.items():
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
    before, after = fit_briefly(Blobs(batch_size="auto"), BatchSizeTuner(max_batch_size=64))
    assert before.batch_size == "auto" and after.batch_size == 36  # 40 fit, less the 10% margin
    assert_untouched(before, after)


@pytest.mark.parametrize(("mode", "expected"), [("binsearch", 45), ("power", 28)])
def test_out_of_memory_caps_the_batch_size(memory_limit, mode, expected):
    memory_limit(50)
    _, after = fit_briefly(Blobs(batch_size="auto"), BatchSizeTuner(mode=mode, max_batch_size=512))
    assert after.batch_size == expected  # binsearch: 50 x 0.9; power: 32 x 0.9


def test_a_fixed_batch_size_is_not_tuned_but_can_scale_the_learning_rate(monkeypatch):
    monkeypatch.setattr(tuning, "largest_fitting", lambda *args: pytest.fail("searched a fixed batch size"))
    datamodule = Blobs(batch_size=32)
    fit_briefly(datamodule, BatchSizeTuner(scale_lr="linear", reference_batch_size=64))
    assert datamodule.batch_size == 32
    assert datamodule.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(LR * 32 / 64)


class ManualModel(TinyModel):
    """Steps its optimizer itself: the search cannot run its trial steps for it."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.manual_backward(super().training_step(batch, batch_idx))
        self.optimizers().step()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"margin": 1.0}, "margin must lie in"),
        ({"mode": "linear"}, "mode must be power or binsearch"),
        ({"max_batch_size": 0}, "must be 1 or more"),
    ],
)
def test_bad_tuner_settings_are_refused_with_the_fix(settings, message):
    with pytest.raises(ValueError, match=message):
        BatchSizeTuner(**settings)


def test_a_model_the_search_cannot_step_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="needs automatic optimization; pass a number"):
        fit_briefly(Blobs(batch_size="auto"), BatchSizeTuner(), model=ManualModel())


# --- Inside a run ---------------------------------------------------------------------------


def test_auto_trains_with_the_size_found_and_the_config_reruns_it(
    tmp_path, monkeypatch, capsys, memory_limit
):
    memory_limit(50)
    monkeypatch.chdir(tmp_path)
    fit = ("fit", *QUICK, "--trainer.max_epochs=2", "--trainer.log_every_n_steps=1")
    lr_monitor = "--trainer.callbacks+={{ cookiecutter.package_name }}.kit.callbacks.LearningRateMonitor"
    auto = ("--data.samples=270", "--data.batch_size=auto", "--tuner.scale_lr=linear")
    run_fixtures_here(monkeypatch, *fit, lr_monitor, *auto)
    assert "batch_size=auto: training with 45 per device" in capsys.readouterr().out  # 50, less 10%
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_*")
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["batch_size"] == 45
    assert tensorboard_settings(run_dir)["data.batch_size"] == 45, "the size trained with, in HParams"
    tuned = tensorboard_scalars(run_dir)
    assert tuned["lr-Adam"][0] == pytest.approx(LR * 45 / 64)
    assert len(tuned["train/loss"]) == 2 * 6  # 270 training samples in batches of 45: 6 per epoch

    # The saved config reruns the same run: no search, the same learning rate, the same losses.
    run_fixtures_here(monkeypatch, "fit", "-c", str(run_dir / "config.yaml"))
    assert "batch_size=auto" not in capsys.readouterr().out
    rerun = tensorboard_scalars(tmp_path / "lightning_logs" / "version_1")
    assert rerun["lr-Adam"] == tuned["lr-Adam"] and rerun["train/loss"] == tuned["train/loss"]


def test_a_size_that_leaves_short_epochs_logs_every_epoch(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*smaller than the logging interval")  # Lightning's
        run_fixtures_here(
            monkeypatch,
            "fit",
            *QUICK,
            "--trainer.max_epochs=2",
            "--data.samples=270",
            "--data.batch_size=auto",
        )
    out = capsys.readouterr().out
    assert "training with 270 per device" in out, "all of the 270 samples: one batch an epoch"
    assert "batch_size=auto: logging every step, an epoch at this size (not 50)" in out
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_*")
    assert len(tensorboard_scalars(run_dir)["train/loss"]) == 2, "a point each epoch"


# --- Under DDP: two CPU processes ----------------------------------------------------------


class TrainedWith(L.Callback):
    """Each DDP process writes the batch size it trained with and its step count to rank<N>.json."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        report = {"batch_size": trainer.datamodule.batch_size, "steps": trainer.global_step}
        Path(f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


def fit_with_ddp(folder: Path, *flags: str, fake_oom_above: str = "") -> str:
    """`fit` with DDP on 2 CPU processes and batch_size=auto; its output."""
    result = run_fixtures(folder, "fit", *DDP_AUTO, *flags, env={"FAKE_OOM_ABOVE": fake_oom_above})
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def trained_with(folder: Path) -> list[dict[str, int]]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.slow
def test_ddp_ranks_tune_then_train_with_one_batch_size(tmp_path):
    output = fit_with_ddp(tmp_path)
    # On a CPU nothing runs out of memory: each rank's share of the 240 training samples is the limit.
    assert "batch_size=auto on rank 1: 120 fits" in output
    assert "training with 120 per device, the smallest over 2 ranks" in output
    assert trained_with(tmp_path) == [{"batch_size": 120, "steps": 1}] * 2
    (config,) = tmp_path.glob("lightning_logs/version_*/config.yaml")
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == 120


@pytest.mark.slow
def test_ddp_ranks_with_different_memory_settle_on_the_smaller(tmp_path):
    output = fit_with_ddp(tmp_path, "--data.samples=216", fake_oom_above="100,40")
    assert "batch_size=auto on rank 0: 100 fits" in output and "batch_size=auto on rank 1: 40 fits" in output
    assert "training with 36 per device, the smallest over 2 ranks" in output  # 40, less 10%
    assert trained_with(tmp_path) == [{"batch_size": 36, "steps": 3}] * 2  # 108 samples per rank / 36


# --- On a GPU ---------------------------------------------------------------------------------

MIB_PER_SAMPLE = 256


class MemoryHungry(TinyModel):
    """Holds MIB_PER_SAMPLE of GPU memory per sample during a step: runs out of memory for real."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        ballast = torch.zeros(len(batch[0]), MIB_PER_SAMPLE * 2**20, dtype=torch.uint8, device=self.device)
        return super().training_step(batch, batch_idx) + ballast[0, 0]


@requires_gpus(1)
def test_on_a_gpu_real_out_of_memory_is_caught_and_cleaned_up():
    free, _ = torch.cuda.mem_get_info()
    limit = free // (MIB_PER_SAMPLE * 2**20)  # samples whose ballast fits in the free memory
    datamodule = Blobs(batch_size="auto", samples=4 * limit)  # memory, not the data, is the limit
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
    trainer.fit(MemoryHungry(), datamodule=datamodule)
    assert 0.7 * limit <= datamodule.batch_size <= 0.9 * limit
    assert_untouched(before, after)
    assert after.gpu_memory <= before.gpu_memory + 2**30, "the failed trials' memory was not released"
