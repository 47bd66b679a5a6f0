"""A model and a data set the kit has never seen: the kit's own fixtures, nothing of the example.

Run as `python -m kit_fixtures fit ...` (with this folder on PYTHONPATH), it is a `main.py` for
them, built on `kit.cli.KitCLI` the way the project's own `cli.py` is.
"""

from typing import Literal

import lightning as L
import torch
from torch import Tensor, nn
from torch.utils.data import DistributedSampler, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from {{ cookiecutter.package_name }}.kit.cli import KitCLI, run

FEATURES, CLASSES, SAMPLES = 4, 3, 240


class Blobs(L.LightningDataModule):
    """Three Gaussian blobs in 4 dimensions: 240 training samples, 60 for validation."""

    def __init__(self, batch_size: int | Literal["auto"] = 16, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.seed = seed

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        centres = 3 * torch.randn(CLASSES, FEATURES, generator=generator)
        labels = torch.arange(SAMPLES + SAMPLES // 4) % CLASSES
        points = centres[labels] + torch.randn(len(labels), FEATURES, generator=generator)
        self.train_set = TensorDataset(points[:SAMPLES], labels[:SAMPLES])
        self.val_set = TensorDataset(points[SAMPLES:], labels[SAMPLES:])

    def train_dataloader(self) -> StatefulDataLoader:
        trainer = self.trainer
        sampler: DistributedSampler[int] = DistributedSampler(
            self.train_set,
            num_replicas=trainer.world_size if trainer is not None else 1,
            rank=trainer.global_rank if trainer is not None else 0,
            shuffle=True,
            seed=self.seed,
        )
        sampler.set_epoch(trainer.current_epoch if trainer is not None else 0)
        return StatefulDataLoader(self.train_set, batch_size=int(self.batch_size), sampler=sampler)

    def val_dataloader(self) -> StatefulDataLoader:
        return StatefulDataLoader(self.val_set, batch_size=int(self.batch_size))


class TinyModel(L.LightningModule):
    """An MLP with dropout (so the random state matters to an exact resume)."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(
            nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, CLASSES)
        )

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        points, labels = batch
        loss = nn.functional.cross_entropy(self.layers(points), labels)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        points, labels = batch
        logits = self.layers(points)
        self.log("val/loss", nn.functional.cross_entropy(logits, labels))
        self.log("val/acc", (logits.argmax(-1) == labels).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:  # replaced by --optimizer when given
        return torch.optim.Adam(self.parameters(), lr=0.01)


class FixtureCLI(KitCLI):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(TinyModel, Blobs, **kwargs)


if __name__ == "__main__":
    run(FixtureCLI)
