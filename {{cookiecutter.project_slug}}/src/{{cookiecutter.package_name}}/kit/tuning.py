"""`--data.batch_size=auto`: the largest per-device batch size that fits, also under DDP.

Lightning's own BatchSizeFinder refuses distributed strategies, so this callback does the search
itself at the start of `fit`, when DDP is up, the model is on its device and the train loader is
not built yet. Each rank searches on its own device; then the ranks agree on the smallest size any
of them holds (an all-reduce MIN), so none runs out of memory and all take the same steps. Trials
call the LightningModule directly, never the DDP wrapper, so no gradient or buffer sync happens
while ranks run different numbers of trials. Every trace of the trials is undone before training.
"""

import contextlib
import itertools
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.memory import garbage_collection_cuda, is_oom_error
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn
from torch.utils.data import DataLoader
from torchmetrics import Metric

from .datamodule import tunes_batch_size
from .internals import logging_switched_off

SearchMode = Literal["power", "binsearch"]
LrScaling = Literal["none", "linear"]


def largest_fitting(fits: Callable[[int], bool], cap: int, mode: SearchMode = "binsearch") -> int:
    """The largest size from 1 to `cap` for which `fits` holds (0 if none), in few trials.

    `cap` itself goes first: one trial when memory is no limit, as on a CPU. Otherwise sizes
    double from 2 until one fails; `binsearch` then bisects between the last size that fit and
    the first that failed, `power` keeps the last size that fit.
    """
    if fits(cap):
        return cap
    fit, fail, size = 0, cap, 2  # the largest size known to fit, the smallest known to fail
    while size < fail and fits(size):
        fit, size = size, 2 * size
    fail = min(fail, size)
    while fail - fit > 1 and (mode == "binsearch" or not fit):
        size = (fit + fail) // 2
        fit, fail = (size, fail) if fits(size) else (fit, size)
    return fit


class BatchSizeTuner(Callback):
    """Resolves `batch_size="auto"` on the DataModule at the start of fit; see the module docstring.

    Any other batch size skips the search. `scale_lr="linear"` applies either way: it reads the
    configured learning rate as meant for `reference_batch_size` per device, so a run saved with
    the tuned size and rerun with `-c` trains with the same learning rate.
    """

    def __init__(
        self,
        mode: SearchMode = "binsearch",
        max_batch_size: int = 8192,
        margin: float = 0.1,
        steps_per_trial: int = 3,
        scale_lr: LrScaling = "none",
        reference_batch_size: int = 64,
        record: Callable[[L.Trainer, str, Any], None] | None = None,
    ) -> None:
        """
        Args:
            mode: `power` doubles the size until it runs out of memory; `binsearch` then bisects
                between the last size that fit and the first that did not.
            max_batch_size: Upper bound per device. The training samples per device bound it too.
            margin: Train with (1 - margin) x the largest size that fit in memory: headroom for
                memory that varies between steps.
            steps_per_trial: Optimizer steps per tried size; two or more also count the memory
                of optimizer state, which the first step allocates.
            scale_lr: `linear` multiplies the learning rate by batch_size / reference_batch_size.
            reference_batch_size: The per-device batch size the configured learning rate is for.
            record: Called with (trainer, "data.batch_size", the size found): the CLI passes its run
                folder's `record_setting`, which writes it into the run's config.yaml.
        """
        if mode not in ("power", "binsearch") or scale_lr not in ("none", "linear"):
            raise ValueError(f"mode must be power or binsearch, scale_lr none or linear: {mode}, {scale_lr}.")
        if min(max_batch_size, steps_per_trial, reference_batch_size) < 1:
            raise ValueError("max_batch_size, steps_per_trial and reference_batch_size must be 1 or more.")
        if not 0 <= margin < 1:
            raise ValueError(f"margin must lie in [0, 1), e.g. 0.1 for 10% headroom; got {margin}.")
        self.mode = mode
        self.max_batch_size = max_batch_size
        self.margin = margin
        self.steps_per_trial = steps_per_trial
        self.scale_lr = scale_lr
        self.reference_batch_size = reference_batch_size
        self.record = record

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        if tunes_batch_size(datamodule):
            batch_size = self.tune(trainer, pl_module, datamodule)
            use_batch_size(datamodule, batch_size)
            if self.record is not None:
                self.record(trainer, "data.batch_size", batch_size)
            log_every_epoch(trainer, datamodule)
        if self.scale_lr == "linear":
            scale_learning_rates(trainer, datamodule.batch_size / self.reference_batch_size)

    def tune(self, trainer: L.Trainer, module: L.LightningModule, datamodule: L.LightningDataModule) -> int:
        """The per-device batch size for every rank: the smallest that any rank found."""
        started = time.perf_counter()
        own = self.batch_size_for_this_device(trainer, module, datamodule)
        chosen = int(trainer.strategy.reduce(torch.tensor(own, device=module.device), reduce_op="min"))
        if chosen < 1:
            raise RuntimeError(
                "batch_size=auto: not even a batch of 1 fits in memory on some device. Use a smaller "
                "model, --trainer.precision=bf16-mixed, or more devices."
            )
        if trainer.is_global_zero:
            ranks = f", the smallest over {trainer.world_size} ranks" if trainer.world_size > 1 else ""
            took = time.perf_counter() - started
            print(f"batch_size=auto: training with {chosen} per device{ranks} (tuned in {took:.1f} s)")
        return chosen

    def batch_size_for_this_device(
        self, trainer: L.Trainer, module: L.LightningModule, datamodule: L.LightningDataModule
    ) -> int:
        """The largest size that trains on this rank's device, less the margin if memory limited it."""
        if not module.automatic_optimization:
            raise ValueError("batch_size=auto needs automatic optimization; pass a number for this model.")
        if trainer.world_size > 1 and any(isinstance(m, nn.SyncBatchNorm) for m in module.modules()):
            raise ValueError(
                "batch_size=auto cannot tune with sync_batchnorm under DDP (its trials would wait on each "
                "other): pass a number, or tune once without --trainer.sync_batchnorm."
            )
        datamodule.batch_size = 1
        samples = samples_per_device(datamodule.train_dataloader(), trainer.world_size)
        cap = min(self.max_batch_size, samples)
        trials = 0

        def fits(size: int) -> bool:
            nonlocal trials
            trials += 1
            datamodule.batch_size = size
            try:
                train_steps(trainer, module, datamodule.train_dataloader(), self.steps_per_trial)
                return True
            except Exception as error:
                if not (isinstance(error, torch.OutOfMemoryError) or is_oom_error(error)):
                    raise
            garbage_collection_cuda()  # out here the failed step's tensors are gone: free their memory
            return False

        # The DDP wrapper is never called; no_sync also keeps its gradient hooks quiet.
        pause_sync = getattr(trainer.strategy.model, "no_sync", contextlib.nullcontext)
        with pause_sync(), restored_afterwards(trainer, module):
            largest = largest_fitting(fits, cap, self.mode)
        if largest < cap:  # memory set the limit: keep headroom
            own = max(1, math.floor(largest * (1 - self.margin))) if largest else 0
            limit = f"memory; {own} after the {self.margin:.0%} margin"
        else:
            own = largest
            limit = "training samples per device" if cap == samples else "max_batch_size"
        rank = f" on rank {trainer.global_rank}" if trainer.world_size > 1 else ""
        print(f"batch_size=auto{rank}: {largest} fits (limit: {limit}; trials: {trials})")
        return own


def train_steps(trainer: L.Trainer, module: L.LightningModule, loader: DataLoader, steps: int) -> None:
    """`steps` optimizer steps on `module` itself: no loop, no callbacks, no DDP communication."""
    for batch_idx, batch in enumerate(itertools.islice(itertools.cycle(loader), steps)):
        batch = trainer.strategy.batch_to_device(trainer.precision_plugin.convert_input(batch))
        with logging_switched_off(module), trainer.precision_plugin.train_step_context():
            output = module.training_step(batch, batch_idx)
        loss = output["loss"] if isinstance(output, Mapping) else output
        if loss is None:
            raise ValueError("batch_size=auto needs training_step to return the loss; pass a number instead.")
        loss.backward()
        for optimizer in trainer.optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


@contextlib.contextmanager
def restored_afterwards(trainer: L.Trainer, module: L.LightningModule) -> Iterator[None]:
    """Undo the trials: weights and buffers, optimizer state, gradients, train/eval modes, metric
    states, random generators, and memory left over from a trial that ran out of it."""
    weights = _copy_to_cpu(module.state_dict())
    optimizer_states = [_copy_to_cpu(optimizer.state_dict()) for optimizer in trainer.optimizers]
    modes = {submodule: submodule.training for submodule in module.modules()}
    device = trainer.strategy.root_device
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            module.train()
            yield
    finally:
        module.zero_grad(set_to_none=True)
        module.load_state_dict(weights)
        for optimizer, state in zip(trainer.optimizers, optimizer_states, strict=True):
            optimizer.load_state_dict(state)
        for submodule, training in modes.items():
            submodule.train(training)
            if isinstance(submodule, Metric):
                submodule.reset()  # fit has not started: metrics hold nothing yet
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        garbage_collection_cuda()


def _copy_to_cpu(state: Any) -> Any:
    return apply_to_collection(state, Tensor, lambda tensor: tensor.detach().to("cpu", copy=True))


def samples_per_device(loader: DataLoader, world_size: int) -> int:
    """Training samples each rank sees per epoch: no batch can be larger (huge if unknown)."""
    try:
        return math.ceil(len(loader.dataset) / world_size)  # type: ignore[arg-type]
    except TypeError:  # an iterable dataset of unknown length
        return sys.maxsize


def use_batch_size(datamodule: L.LightningDataModule, batch_size: int) -> None:
    """Use `batch_size` from now on, in the DataModule's hparams too (TensorBoard's HParams tab and
    the checkpoint read them)."""
    datamodule.batch_size = batch_size
    if "batch_size" in datamodule.hparams:
        datamodule.save_hyperparameters({**datamodule.hparams, "batch_size": batch_size})


def log_every_epoch(trainer: L.Trainer, datamodule: L.LightningDataModule) -> None:
    """Where the size found leaves fewer batches in an epoch than `log_every_n_steps`, log every
    epoch's worth: a size the user did not choose should not leave train/loss without points
    (Lightning would warn that the interval is longer than an epoch)."""
    batches = math.ceil(
        samples_per_device(datamodule.train_dataloader(), trainer.world_size) / datamodule.batch_size
    )
    if 0 < batches < trainer.log_every_n_steps:
        if trainer.is_global_zero:
            every = f"every {batches} steps" if batches > 1 else "every step"
            asked = trainer.log_every_n_steps
            print(f"batch_size=auto: logging {every}, an epoch at this size (not {asked})")
        trainer.log_every_n_steps = batches


def scale_learning_rates(trainer: L.Trainer, factor: float) -> None:
    """Multiply every learning rate by `factor`, in the optimizers and in the schedulers' base rates."""
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            for key in ("lr", "initial_lr"):
                if key in group:
                    group[key] *= factor
    for config in trainer.lr_scheduler_configs:
        if hasattr(config.scheduler, "base_lrs"):
            config.scheduler.base_lrs = [lr * factor for lr in config.scheduler.base_lrs]
