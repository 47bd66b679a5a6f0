"""Whole-batch loading for datasets that live in memory as tensors.

A standard DataLoader fetches samples one by one and stacks them (collation); for tensors
already in memory one fancy-index per batch (`tensor[indices]`) does the same work many
times faster. `TensorBatchSampler` yields lists of indices, and the DataLoader built by
`batched_loader` passes each list straight to the dataset.
"""

import math
from collections.abc import Iterator

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class TensorBatchSampler(DistributedSampler):
    """Yields this rank's batches of indices, shuffled alike on every rank.

    It is a DistributedSampler so that Lightning leaves it in place under DDP (it would
    otherwise wrap it), calls `set_epoch` on it every epoch, and each rank gets its own
    disjoint share of every epoch. `batch_size` is per device. `skip_batches` makes the next
    epoch start that many batches in, so a run resumed mid-epoch sees exactly the batches the
    interrupted run had still to see.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        shuffle: bool,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.batch_size = batch_size
        self.drop_last_batch = drop_last
        self.skip_batches = 0

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(super().__iter__())
        stop = len(indices) - len(indices) % self.batch_size if self.drop_last_batch else len(indices)
        skip, self.skip_batches = self.skip_batches, 0
        for start in range(skip * self.batch_size, stop, self.batch_size):
            yield indices[start : start + self.batch_size]

    def __len__(self) -> int:
        if self.drop_last_batch:
            return self.num_samples // self.batch_size
        return math.ceil(self.num_samples / self.batch_size)


def batched_loader(
    dataset: Dataset,
    batch_size: int,
    shuffle: bool,
    num_replicas: int = 1,
    rank: int = 0,
    seed: int = 0,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A DataLoader that asks `dataset` for whole batches (`dataset[list_of_indices]`)."""
    sampler = TensorBatchSampler(dataset, batch_size, shuffle, num_replicas, rank, seed)
    return DataLoader(
        dataset,
        sampler=sampler,
        batch_size=None,  # the sampler already yields batches: no per-sample collation
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        # A private generator for worker seeds: iterating a loader then leaves the global
        # random state alone, which keeps a resumed run's dropout masks identical.
        generator=torch.Generator().manual_seed(seed),
    )


def batches_already_trained(trainer: L.Trainer | None) -> int:
    """How many batches of the current epoch ran before this run resumed from a checkpoint.

    Lightning restores the loop's progress before it asks for the train loader; the loader
    then skips those batches instead of replaying the start of the epoch.
    """
    if trainer is None or not trainer.fit_loop.restarting:
        return 0
    return trainer.fit_loop.epoch_loop.batch_progress.current.completed
