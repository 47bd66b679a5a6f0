"""A model and a data set the kit has never seen: the kit's own fixtures, nothing of the example.

Run as `python -m kit_fixtures fit ...` (with src/ and this folder on PYTHONPATH), it is a
`main.py` for them, built on `kit.cli.KitCLI` the way the project's own `cli.py` is.
"""

import math
import os
import sys
from typing import Literal

import lightning as L
import torch
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from {{ cookiecutter.package_name }}.kit.cli import KitCLI, run
from {{ cookiecutter.package_name }}.kit.datamodule import KitDataModule

FEATURES, CLASSES, SAMPLES = 4, 3, 240
IMAGES = "--data.shape=[1,8,8]"  # the blobs as tiny 1x8x8 images, for the TensorBoard pictures
LR = 0.01  # TinyModel's learning rate, unless --optimizer says otherwise


class Blobs(KitDataModule):
    """Three Gaussian blobs: `samples` training points (240) and a quarter as many for validation.

    A point has the shape `shape`: 4 numbers, or an image such as (1, 8, 8); the model takes it
    as `input_shape` (`model_links`). Training drops a last, partial batch: BatchNorm cannot
    train on a batch of one.
    """

    model_links = ("input_shape",)
    drop_last = True

    def __init__(
        self,
        batch_size: int | Literal["auto"] = 16,
        seed: int = 0,
        samples: int = SAMPLES,
        shape: tuple[int, ...] = (FEATURES,),
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, num_workers, seed=seed)
        self.save_hyperparameters()
        self.samples = samples
        self.input_shape = tuple(shape)

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        centres = 3 * torch.randn(CLASSES, *self.input_shape, generator=generator)
        labels = torch.arange(self.samples + self.samples // 4) % CLASSES
        points = centres[labels] + torch.randn(len(labels), *self.input_shape, generator=generator)
        self.train_set = TensorDataset(points[: self.samples], labels[: self.samples])
        self.val_set = self.test_set = TensorDataset(points[self.samples :], labels[self.samples :])


def fake_memory_limit() -> int | None:
    """The largest batch this process "has memory for", from FAKE_OOM_ABOVE; None: no limit.

    One number ("100"), or one per DDP rank ("100,40"): every rank is started with the same
    command line, so the environment is how they come to differ.
    """
    limits = os.environ.get("FAKE_OOM_ABOVE")
    if not limits:
        return None
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    return int(limits.split(",")[rank])


class TinyModel(L.LightningModule):
    """An MLP with BatchNorm and dropout: running statistics and random draws that an exact resume
    and the batch-size search must leave as they were.

    On a CPU nothing runs out of memory, so the forward pass fakes it: with FAKE_OOM_ABOVE set it
    raises torch.OutOfMemoryError on larger batches, after computing (and updating BatchNorm's
    running statistics), as a step that runs out halfway would.
    """

    def __init__(self, hidden: int = 16, input_shape: tuple[int, ...] = (FEATURES,)) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape), hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden, CLASSES),
        )
        self.example_input_array = torch.zeros(1, *input_shape)  # for the graph in TensorBoard

    def forward(self, points: Tensor) -> Tensor:
        logits = self.layers(points)
        limit = fake_memory_limit()
        if limit is not None and len(points) > limit and not torch.jit.is_tracing():  # not for the graph
            raise torch.OutOfMemoryError(f"simulated: a batch of {len(points)} above {limit}")
        return logits

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        points, labels = batch
        loss = nn.functional.cross_entropy(self(points), labels)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        points, labels = batch
        logits = self(points)
        self.log("val/loss", nn.functional.cross_entropy(logits, labels))
        self.log("val/acc", (logits.argmax(-1) == labels).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:  # replaced by --optimizer when given
        return torch.optim.Adam(self.parameters(), lr=LR)


class FixtureCLI(KitCLI):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(TinyModel, Blobs, **kwargs)


if __name__ == "__main__":
    if sys.argv[1:2] == ["sweep"]:  # the kit's sweep, its trials `fit` runs of these fixtures
        from {{ cookiecutter.package_name }}.kit.sweep import main as sweep

        raise SystemExit(sweep([sys.executable, "-m", "kit_fixtures", "fit"], sys.argv[2:]))
    run(FixtureCLI)
