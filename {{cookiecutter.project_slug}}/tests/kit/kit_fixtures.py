"""Models and data sets the kit has never seen: the kit's own fixtures, nothing of the example.

Three task shapes, each a (model, DataModule) pair in `FIXTURES`: `blobs` (tuple batches,
classification), `regression` (tuple batches, one float target, MSE) and `named` (dict batches,
two named inputs and a class target). Run as `python -m kit_fixtures [--fixture=NAME] fit ...`
(with src/ and this folder on PYTHONPATH; `blobs` unless named), it is a `main.py` for them,
built on `kit.cli.KitCLI` the way the project's own `cli.py` is.
"""

import functools
import math
import os
import sys
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor, nn
from torch.utils.data import Dataset, TensorDataset

from {{ cookiecutter.package_name }}.kit.cli import KitCLI, run
from {{ cookiecutter.package_name }}.kit.datamodule import KitDataModule
from {{ cookiecutter.package_name }}.kit.process_exit import run_and_exit

FEATURES, CLASSES, SAMPLES = 4, 3, 240
CLASS_NAMES = ("north", "east", "west")
EXTRA = 2  # the `named` fixture's second input: 2 numbers a sample
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
    class_names = CLASS_NAMES  # written into exports, served with each answer

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
        self.train_set = self.dataset(points[: self.samples], labels[: self.samples])
        self.val_set = self.test_set = self.dataset(points[self.samples :], labels[self.samples :])

    def dataset(self, points: Tensor, labels: Tensor) -> Dataset:
        """Samples as `(point, label)` tuples."""
        return TensorDataset(points, labels)


class BlobsRegression(Blobs):
    """The blobs with a float target a sample: its label plus the mean of its point, shape (1,)."""

    class_names = None  # a regression has no classes

    def dataset(self, points: Tensor, labels: Tensor) -> Dataset:
        return TensorDataset(points, regression_target(points, labels))


def regression_target(points: Tensor, labels: Tensor) -> Tensor:
    return (labels.float() + points.flatten(1).mean(dim=1)).unsqueeze(1)


class BlobsNamed(Blobs):
    """The blobs as dict samples, the way Hugging Face style data arrives: `x` (the point),
    `extra` (two more numbers) and `target` (the label)."""

    def dataset(self, points: Tensor, labels: Tensor) -> Dataset:
        return NamedTensors(x=points, extra=points.flatten(1)[:, :EXTRA].square(), target=labels)


class NamedTensors(Dataset):
    """Tensors of equal length, served one sample at a time as a dict of the same names."""

    def __init__(self, **tensors: Tensor) -> None:
        self.tensors = tensors

    def __len__(self) -> int:
        return len(next(iter(self.tensors.values())))

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {name: tensor[index] for name, tensor in self.tensors.items()}


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
    and the batch-size search must leave as they were. Classifies the blobs.

    On a CPU nothing runs out of memory, so the forward pass fakes it: with FAKE_OOM_ABOVE set it
    raises torch.OutOfMemoryError on larger batches, after computing (and updating BatchNorm's
    running statistics), as a step that runs out halfway would.
    """

    outputs = CLASSES  # numbers the network puts out per sample
    extra_features = 0  # numbers of a second input, after the point

    def __init__(self, hidden: int = 16, input_shape: tuple[int, ...] = (FEATURES,)) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape) + self.extra_features, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden, self.outputs),
        )
        self.example_input_array = torch.zeros(1, *input_shape)  # for the graph in TensorBoard

    def forward(self, points: Tensor) -> Tensor:
        return fake_memory_use(self.layers(points), points)

    def inputs_and_target(self, batch: Any) -> tuple[dict[str, Tensor], Tensor]:
        points, target = batch
        return {"points": points}, target

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.cross_entropy(output, target)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, target = self.inputs_and_target(batch)
        return self.loss(self(**inputs), target)  # logged by the kit's fit guard

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, target = self.inputs_and_target(batch)
        output = self(**inputs)
        self.log("val/loss", self.loss(output, target))
        self.log_quality(output, target)

    def log_quality(self, output: Tensor, target: Tensor) -> None:
        self.log("val/acc", (output.argmax(-1) == target).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """A class and each class's probability (a column of 3 numbers)."""
        inputs, _ = self.inputs_and_target(batch)
        probabilities = self(**inputs).softmax(dim=-1)
        return {"predicted": probabilities.argmax(dim=-1), "probabilities": probabilities}

    def configure_optimizers(self) -> torch.optim.Optimizer:  # replaced by --optimizer when given
        return torch.optim.Adam(self.parameters(), lr=LR)


class TinyRegressor(TinyModel):
    """The MLP with one float output, trained with MSE: a regressor."""

    outputs = 1

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.mse_loss(output, target)

    def log_quality(self, output: Tensor, target: Tensor) -> None:
        self.log("val/mse", nn.functional.mse_loss(output, target))

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """The output tensor as it is, shape (batch, 1)."""
        inputs, _ = self.inputs_and_target(batch)
        return self(**inputs)


class TinyNamedInputs(TinyModel):
    """The MLP on two named inputs, `x` and `extra`, from dict batches: a classifier."""

    extra_features = EXTRA

    def __init__(self, hidden: int = 16, input_shape: tuple[int, ...] = (FEATURES,)) -> None:
        super().__init__(hidden, input_shape)
        self.example_input_array = {"x": torch.zeros(1, *input_shape), "extra": torch.zeros(1, EXTRA)}

    def forward(self, x: Tensor, extra: Tensor) -> Tensor:  # type: ignore[override]
        return fake_memory_use(self.layers(torch.cat([x.flatten(1), extra], dim=1)), x)

    def inputs_and_target(self, batch: Any) -> tuple[dict[str, Tensor], Tensor]:
        return {"x": batch["x"], "extra": batch["extra"]}, batch["target"]

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """A class and the target, as columns."""
        inputs, target = self.inputs_and_target(batch)
        return {"predicted": self(**inputs).argmax(dim=-1), "target": target}


def fake_memory_use(output: Tensor, batch: Tensor) -> Tensor:
    """`output`, or torch.OutOfMemoryError for a batch above `fake_memory_limit()`.

    The batch's length is read only when a limit is set: reading it would fix the batch size of
    an export.
    """
    limit = fake_memory_limit()
    if limit is not None and len(batch) > limit and not torch.jit.is_tracing():  # not for the graph
        raise torch.OutOfMemoryError(f"simulated: a batch of {len(batch)} above {limit}")
    return output


# The fixtures by name, for `--fixture=NAME`: one (model, DataModule) pair per task shape.
FIXTURES: dict[str, tuple[type[TinyModel], type[Blobs]]] = {
    "blobs": (TinyModel, Blobs),
    "regression": (TinyRegressor, BlobsRegression),
    "named": (TinyNamedInputs, BlobsNamed),
}


class FixtureCLI(KitCLI):
    def __init__(self, fixture: str = "blobs", **kwargs: object) -> None:
        super().__init__(*fixture_classes(fixture), **kwargs)


def fixture_classes(name: str) -> tuple[type[L.LightningModule], type[KitDataModule]]:
    """A fixture's (model, DataModule): the three task shapes, or a foreign module
    (`foreign_modules.py`, imported only when named: one of them needs transformers)."""
    if name in FIXTURES:
        return FIXTURES[name]
    from foreign_modules import FOREIGN

    if name not in FOREIGN:
        raise SystemExit(f"error: --fixture={name}: choose one of {', '.join([*FIXTURES, *FOREIGN])}")
    return FOREIGN[name]


def chosen_fixture(args: list[str]) -> tuple[str, list[str]]:
    """The fixture a leading `--fixture=NAME` names (`blobs` without one), and the other arguments.

    The flag stays in `sys.argv`: DDP starts its other ranks with that same command line.
    """
    if not (args and args[0].startswith("--fixture=")):
        return "blobs", args
    name = args[0].split("=", 1)[1]
    fixture_classes(name)  # an unknown name ends here
    return name, args[1:]


def default_config_files() -> list[Path]:
    """Config files read as defaults, as main.py reads configs/default.yaml: KIT_FIXTURES_DEFAULTS
    (os.pathsep between several), inherited by DDP's other ranks."""
    return [Path(name) for name in os.environ.get("KIT_FIXTURES_DEFAULTS", "").split(os.pathsep) if name]


if __name__ == "__main__":
    fixture, args = chosen_fixture(sys.argv[1:])
    if args[:1] == ["sweep"]:  # the kit's sweep, its trials `fit` runs of these fixtures
        from {{ cookiecutter.package_name }}.kit.sweep import main as sweep

        trial = [sys.executable, "-m", "kit_fixtures", f"--fixture={fixture}", "fit"]
        raise SystemExit(sweep(trial, args[1:]))
    run_and_exit(lambda: run(functools.partial(FixtureCLI, fixture), args, default_config_files()))
