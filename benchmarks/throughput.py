"""Training throughput: the project's `fit` against a plain PyTorch loop, same network, data and steps.

Three Lightning runs per round, in rotating order:
- `lightning_floor`: stock Lightning with nothing on (a bare LightningModule around the same network
  and optimizer; no logging, checkpoints, bar or summary): what Lightning's loop itself costs;
- `fit_default`: `python main.py fit` as configured (logging, checkpoints, progress bar);
- `fit_bare`: the same with logging, checkpoints, progress bar and every callback off (the guard too).
Inside each, `plain`, a hand-written loop (shuffle, index whole batches, step; then a validation
pass) on its own copy of the network, runs in lockstep: one plain step before every Lightning
step, one plain validation pass before Lightning's (`InterleavedTimer`). A shared machine's speed
drifts by 10-20% within seconds; paired this closely, both sides see the same machine. Each ratio
is the median over the epochs after the first (warm-up) of Lightning's time over plain's. Wall
time is what users feel; CPU time (this process, all threads) also counts drawing threads.
"""

import contextlib
import copy
import functools
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import TensorDataset

from .project import import_module

RUNS = ("plain", "lightning_floor", "fit_default", "fit_bare", "fit_compiled")
# Stock Lightning runs (no CLI trainer): around the bare floor module, or around the project's model,
# alone or with as many do-nothing callbacks as `main.py fit` has (costs.py).
STOCK_RUNS = ("lightning_floor", "lightning_model", "lightning_idle_callbacks")
LIGHTNING_RUNS = RUNS[1:]
BARE_FLAGS = [
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[]",
]


@dataclass(frozen=True)
class Feature:
    """One always-on part of the default `fit`, and how the cost table (costs.py) turns it off:
    flags, or callbacks (by class name) taken out of the trainer `main.py fit` builds."""

    label: str
    flags: tuple[str, ...] = ()
    callbacks: tuple[str, ...] = ()


FEATURES = {
    "without_guard": Feature("fit guard (stops, NaN, resume, train/loss)", callbacks=("FitGuard",)),
    "without_lr_monitor": Feature("LR monitor", callbacks=("LearningRateMonitor",)),
    "without_pictures": Feature("validation pictures", callbacks=("ValidationImages",)),
    "without_best_ckpt": Feature("best checkpoint", callbacks=("BestCheckpoint",)),
    "without_last_ckpt": Feature("last checkpoint", callbacks=("LastCheckpoint",)),
    "without_progress_bar": Feature("progress bar", flags=("--trainer.enable_progress_bar=false",)),
    "without_logging": Feature("metric logging (TensorBoard)", flags=("--trainer.logger=false",)),
}
RUN_FLAGS = {
    "fit_bare": BARE_FLAGS,
    "fit_compiled": ["--compile.enabled=true"],
    **{run: list(feature.flags) for run, feature in FEATURES.items()},
}


@dataclass(frozen=True)
class Workload:
    """The built-in example (`samples=None`), or that many random images of its shape: many steps."""

    name: str
    samples: int | None
    epochs: int


WORKLOADS = (Workload("example", None, epochs=12), Workload("synthetic", 12_800, epochs=6))


def now() -> tuple[float, float]:
    """(wall, CPU) seconds."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = now()
    return wall - start[0], cpu - start[1]


def add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]


@dataclass
class EpochTimes:
    """(wall, CPU) seconds per epoch: the training part, and the whole epoch with validation."""

    train: list[tuple[float, float]] = field(default_factory=list)
    epoch: list[tuple[float, float]] = field(default_factory=list)


class PlainLoop:
    """The floor: what any training script must do, with no framework around it; driven one step
    (or one validation pass) at a time so that it can run interleaved with Lightning's loop."""

    def __init__(
        self,
        network: nn.Module,
        optimizer: torch.optim.Optimizer,
        train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor],
        batch_size: int,
        precision: str = "32-true",
    ) -> None:
        self.network, self.optimizer, self.batch_size = network, optimizer, batch_size
        device = next(network.parameters()).device  # the Lightning run's device: its data goes there too
        # Mixed precision as Lightning does it: autocast, and for float16 a gradient scaler.
        mixed = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
        self.autocast = functools.partial(torch.autocast, device.type, dtype=mixed, enabled=mixed is not None)
        self.scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
        self.train = tuple(tensor.to(device) for tensor in train)
        self.val = tuple(tensor.to(device) for tensor in val)
        self.loss_fn = nn.CrossEntropyLoss()
        self.order = torch.randperm(len(train[0]), device=device)
        self.position = 0

    def step(self) -> None:
        """One training step on the next batch of a shuffled epoch (reshuffled when used up)."""
        if self.position >= len(self.order):
            self.order, self.position = torch.randperm(len(self.order), device=self.order.device), 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        images, labels = self.train
        self.network.train()
        self.optimizer.zero_grad()
        with self.autocast():
            loss = self.loss_fn(self.network(images[batch]), labels[batch])
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def validate(self) -> None:
        """A validation pass: loss and accuracy over the validation set."""
        images, labels = self.val
        self.network.eval()
        with torch.no_grad(), self.autocast():
            correct, loss = 0, 0.0
            for start in range(0, len(images), self.batch_size):
                logits = self.network(images[start : start + self.batch_size])
                targets = labels[start : start + self.batch_size]
                loss += float(self.loss_fn(logits, targets)) * len(targets)
                correct += int((logits.argmax(-1) == targets).sum())


class InterleavedTimer(L.Callback):
    """Runs the plain loop in lockstep with Lightning's and times both sides of every step.

    Before each Lightning step one plain step runs, and before Lightning's validation one plain
    validation pass, so each pair of figures is taken within milliseconds of each other: a machine
    that slows down for a while slows both alike. Lightning's time is everything between these
    hooks (its loop, the step, the other callbacks, logging), minus the plain work. Per epoch:
    the training part, and the whole epoch (plus validation, checkpoints, epoch-end logging).
    """

    def __init__(self, plain: PlainLoop) -> None:
        self.plain_loop = plain
        self.plain = EpochTimes()
        self.lightning = EpochTimes()
        self._clock: tuple[float, float] | None = None  # when Lightning's time last started running
        self._training = False
        self._sums: dict[str, tuple[float, float]] = {}

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_done()
        self._sums = dict.fromkeys(("lightning", "plain"), (0.0, 0.0))
        self._training = True
        self._clock = now()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._run_plain(self.plain_loop.step)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._training_done()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._training_done()  # when no validation ran this epoch

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_done()

    def _run_plain(self, work: Callable[[], None]) -> None:
        """Stop Lightning's clock, time `work` on the plain side, restart Lightning's clock.

        On a GPU each side's queued work is waited for before its clock stops, so that neither is
        charged with the other's: a sync per step that both sides pay.
        """
        if self._clock is None:
            return
        self._finish_gpu_work()
        self._sums["lightning"] = add(self._sums["lightning"], since(self._clock))
        started = now()
        with torch.enable_grad():
            work()
        self._finish_gpu_work()
        self._sums["plain"] = add(self._sums["plain"], since(started))
        self._clock = now()

    def _finish_gpu_work(self) -> None:
        if self.plain_loop.train[0].is_cuda:
            torch.cuda.synchronize()

    def _training_done(self) -> None:
        if not self._training:  # e.g. the sanity check's validation, before training starts
            return
        self._training = False
        self._run_plain(lambda: None)  # brings Lightning's sum up to now
        self.lightning.train.append(self._sums["lightning"])
        self.plain.train.append(self._sums["plain"])
        self._run_plain(self.plain_loop.validate)

    def _epoch_done(self) -> None:
        if self._clock is None:
            return
        self._training_done()
        self._run_plain(lambda: None)
        self.lightning.epoch.append(self._sums["lightning"])
        self.plain.epoch.append(self._sums["plain"])
        self._clock = None


class FloorModule(L.LightningModule):
    """The least a LightningModule can be for this task: loss, one optimizer, a validation pass."""

    def __init__(self, network: nn.Module, make_optimizer: Callable[..., torch.optim.Optimizer]) -> None:
        super().__init__()
        self.network, self.make_optimizer = network, make_optimizer
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return self.loss_fn(self.network(images), labels)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> tuple[float, int]:
        images, labels = batch
        logits = self.network(images)
        return float(self.loss_fn(logits, labels)), int((logits.argmax(-1) == labels).sum())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(self.parameters())


def synthetic_datamodule(base: type, samples: int) -> L.LightningDataModule:
    """The project's DataModule holding random images instead of its data: its own loaders."""

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


def run_cli(project: Path, flags: list[str], fit: Callable[[Any], None], folder: Path | None = None) -> None:
    """Build `python main.py fit FLAGS` exactly as the CLI builds it, in `folder` (default: a temp
    folder), then call `fit(cli)` instead of `cli.trainer.fit`."""
    project_cli: type = import_module(project, "cli").ProjectCLI

    class BenchmarkCLI(project_cli):  # type: ignore[misc, valid-type]
        def fit(self, **kwargs: Any) -> None:  # LightningCLI calls this instead of `trainer.fit`
            fit(self)

    argv = sys.argv
    sys.argv = argv[:1]  # LightningCLI warns when it gets args while sys.argv holds others
    try:
        with contextlib.ExitStack() as stack:
            where = folder or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fit-")))
            stack.enter_context(inside(where))
            BenchmarkCLI(default_config_files=[project / "configs" / "default.yaml"], args=["fit", *flags])
    finally:
        sys.argv = argv


def optimizer_factory(cli: Any) -> Callable[..., torch.optim.Optimizer]:
    """The run's `--optimizer` as a factory, so the plain loop and the floor run build the same one."""
    spec = cli.config[cli.subcommand].optimizer
    module_name, _, class_name = spec.class_path.rpartition(".")
    return functools.partial(
        getattr(importlib.import_module(module_name), class_name), **dict(spec.init_args)
    )


def time_run(
    project: Path, workload: Workload, run: str, precision: str | None = None
) -> tuple[InterleavedTimer, int]:
    """One Lightning run of `workload` with the plain loop in lockstep; and its steps per epoch.
    `precision`: `--trainer.precision` for every side (default: the project's config)."""
    base = import_module(project, "data").DigitsDataModule
    datamodule = base() if workload.samples is None else synthetic_datamodule(base, workload.samples)
    timer: InterleavedTimer | None = None
    steps = 0

    def train(cli: Any) -> None:
        nonlocal timer, steps
        datamodule.setup("fit")
        device = cli.trainer.strategy.root_device  # the CPU, or the GPU Lightning will train on
        network = copy.deepcopy(cli.model.network).to(device)  # the project's ConvNet, as configured
        make_optimizer = optimizer_factory(cli)
        optimizer = make_optimizer(network.parameters())  # and its optimizer
        train_set, val_set = datamodule.train_set.tensors, datamodule.val_set.tensors
        plain = PlainLoop(
            network, optimizer, train_set, val_set, datamodule.batch_size, cli.trainer.precision
        )
        timer = InterleavedTimer(plain)
        if run in STOCK_RUNS:
            # As many callbacks that do nothing as `main.py fit` has: Lightning's price for calling them.
            idle = [L.Callback() for _ in cli.trainer.callbacks] if run == "lightning_idle_callbacks" else []
            trainer = L.Trainer(
                max_epochs=workload.epochs,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                callbacks=[*idle, timer],
                precision=cli.trainer.precision,
            )
            # The floor's bare module, or the project's own model (its metrics and logging).
            floor = FloorModule(cli.model.network, make_optimizer)
            trainer.fit(floor if run == "lightning_floor" else cli.model, datamodule)
        else:
            trainer = cli.trainer
            removed = FEATURES[run].callbacks if run in FEATURES else ()
            kept = [callback for callback in trainer.callbacks if type(callback).__name__ not in removed]
            if run == "fit_bare":  # the kit installs its guard and checkpoints whatever the flags say
                kept = []
            if len(kept) == len(trainer.callbacks) and removed:
                raise RuntimeError(f"{run}: the trainer has no callback among {removed}")
            trainer.callbacks[:] = [*kept, timer]
            trainer.fit(cli.model, datamodule)
        steps = trainer.num_training_batches

    flags = [f"--trainer.max_epochs={workload.epochs}", *RUN_FLAGS.get(run, [])]
    if precision:
        flags.append(f"--trainer.precision={precision}")
    run_cli(project, flags, train)
    assert timer is not None
    return timer, steps


def measure_workload(
    project: Path,
    workload: Workload,
    rounds: int,
    log: Callable[[str], None],
    lightning_runs: tuple[str, ...] = LIGHTNING_RUNS,
    precision: str | None = None,
) -> dict:
    """Median wall and CPU ms per epoch of each run, and its ratios to the plain loop run in lockstep;
    `*_spread`: how far apart the rounds' own median ratios lie (max - min)."""
    runs = ("plain", *lightning_runs)
    times = {run: EpochTimes() for run in runs}
    ratios: dict[str, dict[str, list[float]]] = {run: {} for run in lightning_runs}
    round_ratios: dict[str, dict[str, list[float]]] = {run: {} for run in lightning_runs}
    steps = {}
    warmups: dict[str, list[float]] = {}
    for round_index in range(rounds):
        shift = round_index % len(lightning_runs)  # no run always goes first
        for run in lightning_runs[shift:] + lightning_runs[:shift]:
            log(f"throughput: {workload.name} round {round_index + 1}/{rounds}: {run} (and plain)")
            timer, steps[run] = time_run(project, workload, run, precision)
            # The first epoch's extra time over the later ones: torch.compile's compile time.
            first, later = (
                timer.lightning.epoch[0][0],
                statistics.median(t[0] for t in timer.lightning.epoch[1:]),
            )
            warmups.setdefault(run, []).append(first - later)
            for part in ("train", "epoch"):
                plain, lightning = getattr(timer.plain, part)[1:], getattr(timer.lightning, part)[1:]
                getattr(times["plain"], part).extend(plain)  # the first epoch is warm-up
                getattr(times[run], part).extend(lightning)
                for suffix, clock in (("", 0), ("_cpu", 1)):
                    pairs = [mine[clock] / floor[clock] for mine, floor in zip(lightning, plain, strict=True)]
                    ratios[run].setdefault(f"{part}{suffix}_ratio", []).extend(pairs)
                    round_ratios[run].setdefault(f"{part}{suffix}_ratio", []).append(statistics.median(pairs))
    if len(set(steps.values())) != 1:
        raise RuntimeError(f"the runs took different numbers of steps per epoch: {steps}")

    result: dict[str, Any] = {
        "steps_per_epoch": steps[lightning_runs[0]],
        "epochs_timed": len(times[lightning_runs[0]].train),
    }
    for run in runs:
        figures = {
            f"{part}{suffix}_ms": 1000 * statistics.median(t[clock] for t in getattr(times[run], part))
            for part in ("train", "epoch")
            for suffix, clock in (("", 0), ("_cpu", 1))
        }
        if run != "plain":
            figures.update({key: statistics.median(values) for key, values in ratios[run].items()})
            figures.update({f"{key}_spread": max(v) - min(v) for key, v in round_ratios[run].items()})
            # What a run adds to an epoch: its median ratio applied to the median plain epoch.
            figures["epoch_overhead_ms"] = (figures["epoch_ratio"] - 1) * result["plain"]["epoch_ms"]
            figures["first_epoch_extra_s"] = statistics.median(warmups[run])
        result[run] = figures
    return result


def measure(
    project: Path, rounds: int = 3, log: Callable[[str], None] = print, precision: str | None = None
) -> dict:
    return {
        workload.name: measure_workload(project, workload, rounds, log, precision=precision)
        for workload in WORKLOADS
    }


HEADER = [
    "workload",
    "run",
    "ms/epoch: train / whole",
    "x plain: wall",
    "x plain: CPU",
    "+ms/epoch",
    "1st epoch +s",
]


def rows(result: dict) -> list[list[str]]:
    """Per workload and run: median ms per epoch (training part / whole epoch), ratios to plain, and the
    whole epoch's extra ms over plain (on the tiny example: the fixed per-epoch cost)."""
    table = []
    for workload, figures in result.items():
        for run in RUNS:
            run_figures = figures[run]
            wall = cpu = extra = first = ""
            if run != "plain":
                first = "{first_epoch_extra_s:+.1f}".format(**run_figures)
                wall = "x{train_ratio:.2f} / x{epoch_ratio:.2f}".format(**run_figures)
                cpu = "x{train_cpu_ratio:.2f} / x{epoch_cpu_ratio:.2f}".format(**run_figures)
                extra = "{epoch_overhead_ms:+.0f}".format(**run_figures)
            times = "{train_ms:.0f} / {epoch_ms:.0f}".format(**run_figures)
            label = f"{workload}: {figures['steps_per_epoch']} steps"
            table.append([label, run, times, wall, cpu, extra, first])
    return table
