"""`--optimizer` and `--lr_scheduler` wired the way each scheduler expects to be stepped."""

import importlib
import inspect
from typing import Any

import lightning as L
from lightning.pytorch.cli import LRSchedulerTypeUnion
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CyclicLR, OneCycleLR, ReduceLROnPlateau

from .errors import UsageError

# Schedulers whose own docs say to step them after every batch, not every epoch.
PER_STEP_SCHEDULERS = (OneCycleLR, CyclicLR)
LEARNING_RATE_CURVE = "train/lr"


def configure_optimizers(
    lightning_module: L.LightningModule,
    optimizer: Optimizer,
    lr_scheduler: LRSchedulerTypeUnion | None = None,
) -> Any:
    """Lightning's default steps every scheduler once per epoch; OneCycleLR and CyclicLR are
    stepped per batch, and ReduceLROnPlateau watches the metric named by its own `monitor`, or
    else what the best checkpoint watches (`checkpoint.monitor`), so a project names it once."""
    if lr_scheduler is None:
        return optimizer
    # The learning-rate curve's name (LearningRateMonitor's documented `name` key): train/lr
    # beside train/loss in TensorBoard, not `lr-AdamW` in a group of its own, opened first.
    scheduler: dict[str, Any] = {"scheduler": lr_scheduler, "name": LEARNING_RATE_CURVE}
    if isinstance(lr_scheduler, ReduceLROnPlateau):
        scheduler["monitor"] = plateau_monitor(lightning_module, lr_scheduler)
    if isinstance(lr_scheduler, PER_STEP_SCHEDULERS):
        scheduler["interval"] = "step"
    return {"optimizer": optimizer, "lr_scheduler": scheduler}


def plateau_monitor(lightning_module: L.LightningModule | None, plateau: ReduceLROnPlateau) -> str:
    """The metric `plateau` watches: its own `monitor` (Lightning's version has one), else the
    best checkpoint's, where the two agree on whether lower is better."""
    monitor = getattr(plateau, "monitor", None)
    if monitor is not None:
        return str(monitor)
    try:
        checkpoint = lightning_module.trainer.checkpoint_callback  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):  # no module, or not attached to a Trainer
        checkpoint = None
    watched = getattr(checkpoint, "monitor", None)
    if watched is not None and getattr(checkpoint, "mode", None) == plateau.mode:
        return str(watched)
    raise UsageError(
        f"ReduceLROnPlateau (mode {plateau.mode}) needs a metric to watch: name it with Lightning's version, "
        "--lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val/loss (mode min) "
        "or --lr_scheduler.monitor=val/acc --lr_scheduler.mode=max."
    )


def describe(spec: Any) -> str:
    """`Name(setting=value, ...)` for a class_path/init_args spec, with what differs from defaults.

    jsonargparse keeps the settings a new class shares with the old one (--optimizer=Adam after
    AdamW keeps its weight_decay): this shows what will actually be built.
    """
    if spec is None:
        return "none"
    module_name, _, class_name = spec.class_path.rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module_name), class_name)).parameters
    defaults = {name: parameter.default for name, parameter in parameters.items()}
    settings = dict(spec.init_args or {}).items()

    def same(value: Any, default: Any) -> bool:
        return (tuple(value) if isinstance(value, list) else value) == default

    changed = ", ".join(f"{name}={value}" for name, value in settings if not same(value, defaults.get(name)))
    return f"{class_name}({changed})"
