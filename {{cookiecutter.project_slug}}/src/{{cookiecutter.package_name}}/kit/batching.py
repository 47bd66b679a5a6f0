"""Whole batches from in-memory tensors: one indexing operation per batch, not one per sample.

A `DataLoader` normally fetches `dataset[i]` for each index and stacks the samples. For data
already in memory that is most of the loading time. PyTorch's loader asks a dataset for a whole
batch when it has `__getitems__`; `TensorBatchDataset` answers with the stacked tensors and
`collate` passes them through. Any other dataset still goes through PyTorch's `default_collate`,
so swapping in your own `Dataset` needs no change to the loaders.
"""

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import TensorDataset
from torch.utils.data._utils.collate import default_collate


class StackedBatch(tuple):
    """A batch whose tensors are already stacked along the first dimension."""


class TensorBatchDataset(TensorDataset):
    """A `TensorDataset` that serves a batch of indices with one indexing operation per tensor."""

    def __getitems__(self, indices: Sequence[int]) -> StackedBatch:
        index = torch.as_tensor(indices, dtype=torch.long)
        return StackedBatch(tensor[index] for tensor in self.tensors)


def collate(samples: Any) -> Any:
    """The loader's `collate_fn`: stacked batches as they are, anything else as PyTorch would."""
    if isinstance(samples, StackedBatch):
        return list(samples)
    return default_collate(samples)
