"""Training throughput: the project's `fit` against a plain PyTorch loop, same network, data and steps.

Three runs per round, in rotating order so that the noise of a shared machine hits all alike:
- `plain`: a hand-written loop (shuffle, index whole batches, step; then a validation pass);
- `fit_default`: `python main.py fit` as configured (logging, checkpoints, progress bar);
- `fit_bare`: the same with logging, checkpoints, progress bar and config callbacks off.
Each figure is a median over the epochs after each run's first (warm-up) epoch. Wall time is
what users feel; CPU time (this process, all threads) is steadier when other work shares the
machine, and also counts a progress bar's drawing thread.
"""

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import TensorDataset

from .project import import_module

RUNS = ("plain", "fit_default", "fit_bare")
BARE_FLAGS = [
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[]",
]


@dataclass(frozen=True)
class Workload:
    """The built-in example (`samples=None`), or that many random images of its shape: many steps."""

    name: str
    samples: int | None
    epochs: int


WORKLOADS = (Workload("example", None, epochs=12), Workload("synthetic", 12_800, epochs=4))


def now() -> tuple[float, float]:
    """(wall, CPU) seconds."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = now()
    return wall - start[0], cpu - start[1]


class EpochTimer(L.Callback):
    """Per epoch, between Lightning's own hooks: the training part (batches and per-step logging) and
    the whole epoch (plus validation, checkpoints, epoch-end logging)."""

    def __init__(self) -> None:
        self.train: list[tuple[float, float]] = []
        self.epoch: list[tuple[float, float]] = []
        self._started: tuple[float, float] | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_done()
        self._started = now()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._training_done()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._training_done()  # when no validation ran this epoch

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_done()

    def _training_done(self) -> None:
        if self._started is not None and len(self.train) == len(self.epoch):
            self.train.append(since(self._started))

    def _epoch_done(self) -> None:
        if self._started is not None:
            self.epoch.append(since(self._started))
            self._started = None


def plain_loop(
    network: nn.Module,
    optimizer: torch.optim.Optimizer,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    epochs: int,
    timer: EpochTimer,
) -> None:
    """The floor: what any training script must do, with no framework around it."""
    loss_fn = nn.CrossEntropyLoss()
    (images, labels), (val_images, val_labels) = train, val
    for _ in range(epochs):
        started = now()
        network.train()
        order = torch.randperm(len(images))
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            loss_fn(network(images[batch]), labels[batch]).backward()
            optimizer.step()
        timer.train.append(since(started))
        network.eval()
        with torch.no_grad():
            correct, loss = 0, 0.0
            for start in range(0, len(val_images), batch_size):
                logits = network(val_images[start : start + batch_size])
                targets = val_labels[start : start + batch_size]
                loss += float(loss_fn(logits, targets)) * len(targets)
                correct += int((logits.argmax(-1) == targets).sum())
        timer.epoch.append(since(started))


def synthetic_datamodule(base: type, samples: int) -> L.LightningDataModule:
    """The project's DataModule holding random images instead of its data: its own loaders and batching."""

    class SyntheticDataModule(base):  # type: ignore[misc, valid-type]
        def setup(self, stage: str) -> None:
            if self.train_set is not None:
                return
            generator = torch.Generator().manual_seed(0)

            def random_set(size: int) -> TensorDataset:
                images = torch.rand(size, *self.image_shape, generator=generator)
                return TensorDataset(images, torch.randint(self.num_classes, (size,), generator=generator))

            self.train_set = random_set(samples)
            self.val_set = self.test_set = random_set(samples // 10)

    return SyntheticDataModule()


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def run_cli(project: Path, flags: list[str], fit: Callable[[Any], None]) -> None:
    """Build `python main.py fit FLAGS` exactly as the CLI builds it, in a temp folder, then call `fit(cli)`
    instead of `cli.trainer.fit`."""
    project_cli: type = import_module(project, "cli").ProjectCLI

    class BenchmarkCLI(project_cli):  # type: ignore[misc, valid-type]
        def fit(self, **kwargs: Any) -> None:  # LightningCLI calls this instead of `trainer.fit`
            fit(self)

    argv = sys.argv
    sys.argv = argv[:1]  # LightningCLI warns when it gets args while sys.argv holds others
    try:
        with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp, inside(Path(tmp)):
            BenchmarkCLI(default_config_files=[project / "configs" / "default.yaml"], args=["fit", *flags])
    finally:
        sys.argv = argv


def time_run(project: Path, workload: Workload, run: str) -> tuple[EpochTimer, int]:
    """One run of `workload`: its epoch timings and steps per epoch."""
    base = import_module(project, "data").DigitsDataModule
    datamodule = base() if workload.samples is None else synthetic_datamodule(base, workload.samples)
    timer = EpochTimer()
    steps = 0

    def train_plain(cli: Any) -> None:
        nonlocal steps
        datamodule.setup("fit")
        network = cli.model.network  # the project's ConvNet, freshly built as configured
        optimizer = cli.model.optimizer_factory(network.parameters())  # and its optimizer
        train, val = datamodule.train_set.tensors, datamodule.val_set.tensors
        plain_loop(network, optimizer, train, val, datamodule.batch_size, workload.epochs, timer)
        steps = -(-len(train[0]) // datamodule.batch_size)

    def train_lightning(cli: Any) -> None:
        nonlocal steps
        cli.trainer.callbacks.append(timer)
        cli.trainer.fit(cli.model, datamodule)
        steps = cli.trainer.num_training_batches

    flags = [f"--trainer.max_epochs={workload.epochs}", *(BARE_FLAGS if run == "fit_bare" else [])]
    run_cli(project, flags, train_plain if run == "plain" else train_lightning)
    return timer, steps


def measure_workload(project: Path, workload: Workload, rounds: int, log: Callable[[str], None]) -> dict:
    """Median wall and CPU milliseconds per epoch of each run, and their ratios to the plain loop."""
    timings: dict[str, dict[str, list[tuple[float, float]]]] = {
        run: {"train": [], "epoch": []} for run in RUNS
    }
    steps = {}
    for round_index in range(rounds):
        shift = round_index % len(RUNS)  # no run always goes first
        for run in RUNS[shift:] + RUNS[:shift]:
            log(f"throughput: {workload.name} round {round_index + 1}/{rounds}: {run}")
            timer, steps[run] = time_run(project, workload, run)
            timings[run]["train"] += timer.train[1:]  # the first epoch is warm-up
            timings[run]["epoch"] += timer.epoch[1:]
    if len(set(steps.values())) != 1:
        raise RuntimeError(f"the runs took different numbers of steps per epoch: {steps}")

    def median_ms(run: str, part: str, clock: int) -> float:
        return 1000 * statistics.median(times[clock] for times in timings[run][part])

    result: dict[str, Any] = {
        "steps_per_epoch": steps["plain"],
        "epochs_timed": len(timings["plain"]["train"]),
    }
    for run in RUNS:
        figures = {
            f"{part}{suffix}_ms": median_ms(run, part, clock)
            for part in ("train", "epoch")
            for suffix, clock in (("", 0), ("_cpu", 1))
        }
        if run != "plain":
            plain = result["plain"]
            figures.update(
                {key.replace("_ms", "_ratio"): value / plain[key] for key, value in figures.items()}
            )
            figures["epoch_overhead_ms"] = figures["epoch_ms"] - plain["epoch_ms"]
        result[run] = figures
    return result


def measure(project: Path, rounds: int = 3, log: Callable[[str], None] = print) -> dict:
    return {workload.name: measure_workload(project, workload, rounds, log) for workload in WORKLOADS}


HEADER = ["workload", "run", "ms/epoch: train / whole", "x plain: wall", "x plain: CPU", "+ms/epoch"]


def rows(result: dict) -> list[list[str]]:
    """Per workload and run: median ms per epoch (training part / whole epoch), ratios to plain, and the
    whole epoch's extra ms over plain (on the tiny example: the fixed per-epoch cost)."""
    table = []
    for workload, figures in result.items():
        for run in RUNS:
            run_figures = figures[run]
            wall = cpu = extra = ""
            if run != "plain":
                wall = "x{train_ratio:.2f} / x{epoch_ratio:.2f}".format(**run_figures)
                cpu = "x{train_cpu_ratio:.2f} / x{epoch_cpu_ratio:.2f}".format(**run_figures)
                extra = "{epoch_overhead_ms:+.0f}".format(**run_figures)
            times = "{train_ms:.0f} / {epoch_ms:.0f}".format(**run_figures)
            table.append([f"{workload}: {figures['steps_per_epoch']} steps", run, times, wall, cpu, extra])
    return table
