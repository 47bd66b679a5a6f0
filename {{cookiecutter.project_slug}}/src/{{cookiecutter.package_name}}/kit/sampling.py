"""Samplers that share data among DDP ranks the way training and evaluation each need.

Training: every rank gets an equal share of a shuffle that depends only on (seed, epoch), so a
resumed run replays it exactly. Evaluation: every sample is seen exactly once. Lightning's own
injected sampler pads validation and test sets to equal shares, counting some samples twice,
so metrics and the "best" checkpoint would depend on the number of devices.
"""

from collections.abc import Sized
from typing import Any

import lightning as L
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import Dataset, DistributedSampler, Sampler


def training_sampler(dataset: Dataset, trainer: L.Trainer | None, seed: int) -> DistributedSampler[Any]:
    """This rank's share of a (seed, epoch) shuffle, set to the trainer's current epoch.

    The epoch is set here, not only by Lightning when an epoch starts: a run resumed mid-epoch
    skips the batches it already trained before that, and must skip them in this epoch's order.
    """
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset,
        num_replicas=trainer.world_size if trainer is not None else 1,
        rank=trainer.global_rank if trainer is not None else 0,
        shuffle=True,
        seed=seed,
    )
    sampler.set_epoch(trainer.current_epoch if trainer is not None else 0)
    return sampler


def evaluation_sampler(dataset: Dataset | None, trainer: L.Trainer | None) -> Sampler[int] | None:
    """Under DDP, this rank's samples in order, none repeated; None (plain order) otherwise.

    Ranks may get one batch fewer than others, which evaluation allows: DDP syncs buffers on
    its first forward pass only, and torchmetrics syncs each metric's totals, not its batches.
    """
    if trainer is None or trainer.world_size == 1 or not isinstance(dataset, Sized) or len(dataset) == 0:
        return None
    return UnrepeatedDistributedSampler(
        dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
    )
