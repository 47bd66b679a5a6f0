"""`KitDataModule`: the base of a project's DataModule. The user provides datasets; this loads them.

A subclass assigns `train_set`, `val_set` (and `test_set`, `predict_set` if it has them) in `setup`
and may declare the class attributes below. The base builds every loader: a resumable
`StatefulDataLoader`, a shuffle that depends only on (seed, epoch), each evaluation sample seen
once under DDP, pinned memory on a GPU, worker seeds of its own, and `batch_size`, which
`--data.batch_size=auto` lets the kit's tuner choose at the start of `fit`.
"""

from collections.abc import Iterator, Sequence, Sized
from typing import Any, ClassVar, Literal

import lightning as L
import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler, TensorDataset, default_collate

from . import data_checks

AUTO = "auto"


class KitDataModule(L.LightningDataModule):
    """Loaders for the datasets a subclass assigns in `setup`; see the module docstring.

    Declared attributes (class attributes, all optional):
        model_links: Names of this DataModule's attributes that the model (and its injected
            `network`, if it takes one) receive as constructor arguments of the same name; the
            kit's CLI links them, so model and data never disagree. They must be set when
            `__init__` returns: the model is built before `setup` runs.
        class_names: One name per class, written into exported models and served answers.
        preprocessing: What a raw input goes through before the model sees it (export metadata).
        drop_last: The training loader drops a last, partial batch (BatchNorm cannot train on one sample).
    """

    model_links: ClassVar[tuple[str, ...]] = ()
    class_names: Sequence[str] | None = None
    preprocessing: str | None = None
    drop_last: bool = False
    train_set: Dataset | None = None
    val_set: Dataset | None = None
    test_set: Dataset | None = None
    predict_set: Dataset | None = None  # unset: predict runs on the test set
    # Checks for a subclass to call as it loads data: each raises `DataError`, one line naming
    # `source` and the fix (`kit/data_checks.py`).
    checked_images = staticmethod(data_checks.checked_images)
    checked_class_labels = staticmethod(data_checks.checked_labels)
    checked_targets = staticmethod(data_checks.checked_targets)
    check_split_fractions = staticmethod(data_checks.check_split_fractions)
    check_split_sizes = staticmethod(data_checks.check_split_sizes)

    def __init__(
        self,
        batch_size: int | Literal["auto"] = 64,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        seed: int = 0,
    ) -> None:
        """
        Args:
            batch_size: Samples per batch on each device (with 4 devices a step sees 4x that), or
                `auto`: the largest that fits in memory, found when `fit` starts (`--tuner.*`).
            num_workers: Loader worker processes. 0 suits in-memory data; raise it when loading
                from disk is the bottleneck.
            pin_memory: Page-locked host memory for faster copies to a GPU. `None`: exactly
                when training on a GPU.
            seed: Fixes the shuffling order (and, in subclasses, the split).
        """
        super().__init__()
        if batch_size != AUTO and not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"--data.batch_size must be a positive integer or 'auto', got {batch_size!r}.")
        if num_workers < 0:
            raise ValueError(f"--data.num_workers must be 0 or more, got {num_workers}.")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.seed = seed

    def fixed_batch_size(self) -> int:
        """The batch size; refused while it is still `auto`, which only `fit` resolves."""
        if tunes_batch_size(self):
            raise ValueError(
                "--data.batch_size=auto is resolved by `fit` only; pass a number, "
                "e.g. the one fit chose: it is in the run's config.yaml."
            )
        return int(self.batch_size)

    def train_dataloader(self) -> Any:
        # Each rank's share of a shuffle that depends on (seed, epoch) alone: a resumed run
        # replays it exactly, also from the middle of an epoch.
        dataset = self._dataset("train_set")
        trainer = self.trainer
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset,
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
            shuffle=True,
            seed=self.seed,
        )
        sampler.set_epoch(trainer.current_epoch if trainer else 0)  # before Lightning would, for a resume
        return self._loader(dataset, sampler, drop_last=self.drop_last)

    def val_dataloader(self) -> Any:
        return self._evaluation_loader(self._dataset("val_set"))

    def test_dataloader(self) -> Any:
        return self._evaluation_loader(self._dataset("test_set"))

    def predict_dataloader(self) -> Any:
        name = "test_set" if self.predict_set is None else "predict_set"
        dataset = self._dataset(name)
        if isinstance(dataset, Sized) and len(dataset) == 0:  # Lightning would predict nothing, and succeed
            raise data_checks.DataError(f"{type(self).__name__}.{name} holds no samples: nothing to predict")
        return self._evaluation_loader(dataset)

    def _dataset(self, name: str) -> Dataset:
        dataset = getattr(self, name)
        if dataset is None:
            raise ValueError(f"{type(self).__name__}.setup() assigned no {name}: there is nothing to load")
        return dataset

    def _evaluation_loader(self, dataset: Dataset) -> Any:
        # Under DDP every evaluation sample is seen once, so metrics do not depend on the device count.
        trainer = self.trainer
        if trainer is None or trainer.world_size == 1 or not isinstance(dataset, Sized):
            return self._loader(dataset, None)
        return self._loader(dataset, EvaluationShare(dataset, trainer.world_size, trainer.global_rank))

    def _loader(self, dataset: Dataset, sampler: Sampler | None, drop_last: bool = False) -> Any:
        if type(dataset) is TensorDataset:  # one indexing operation per batch, not one per sample
            dataset = TensorBatchDataset(*dataset.tensors)
        on_gpu = self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"
        return stateful_loader(
            dataset,
            batch_size=self.fixed_batch_size(),
            sampler=sampler,
            drop_last=drop_last,
            num_workers=self.num_workers,
            pin_memory=on_gpu if self.pin_memory is None else self.pin_memory,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate,
            # Worker seeds from a generator of its own: iterating leaves the global random
            # state (dropout masks) alone.
            generator=torch.Generator().manual_seed(self.seed),
        )


def tunes_batch_size(datamodule: object) -> bool:
    """Whether `fit` must search the batch size first: the one place `auto` is interpreted."""
    return isinstance(datamodule, KitDataModule) and datamodule.batch_size == AUTO


def stateful_loader(dataset: Dataset, **settings: Any) -> Any:
    """A `DataLoader` that can say where it is in the epoch (`state_dict()`), workers included.

    Lightning stores its state in every checkpoint and restores it on `--ckpt_path`, so a run
    resumed mid-epoch continues with the very next batch. The one use of torchdata: swap in
    PyTorch's own stateful loader here when it has one.
    """
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(dataset, **settings)


class EvaluationShare(DistributedSampler):
    """This rank's samples of an evaluation set, in order, none repeated.

    Torch's `DistributedSampler` pads the set to equal shares, counting some samples twice, so
    metrics and the "best" checkpoint would depend on the number of devices. Ranks here may get
    one batch fewer, which evaluation allows: torchmetrics syncs totals, not batches. A subclass
    of it all the same: Lightning leaves a loader with a `DistributedSampler` as it is.
    """

    def __init__(self, dataset: Sized, world_size: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=False)  # type: ignore[arg-type]
        self.indices = range(rank, len(dataset), world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class StackedBatch(tuple):
    """A batch whose tensors are already stacked along the first dimension."""


class TensorBatchDataset(TensorDataset):
    """A `TensorDataset` that serves a whole batch with one indexing operation per tensor.

    PyTorch's loader asks a dataset with `__getitems__` for all of a batch's indices at once:
    for data in memory that saves most of the loading time.
    """

    def __getitems__(self, indices: Sequence[int]) -> StackedBatch:
        index = torch.as_tensor(indices, dtype=torch.long)
        return StackedBatch(tensor[index] for tensor in self.tensors)


def collate(samples: Any) -> Any:
    """Stacked batches as they are; anything else (tuples, dicts of tensors) as PyTorch collates it."""
    if isinstance(samples, StackedBatch):
        return list(samples)
    return default_collate(samples)
