"""The LightningDataModule: the digits data, its fixed splits and its loaders.

Train on your own images with `--data.data_path=my_data.npz` (format in `sources.py`), or
replace the loading in `setup` with any map-style `torch.utils.data.Dataset`; the CLI links
`image_shape`/`num_classes` into the model.
"""

from pathlib import Path
from typing import Literal

import lightning as L
import torch
from torch.utils.data import Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from .kit.batching import TensorBatchDataset, collate
from .kit.data_checks import check_split_sizes
from .kit.sampling import evaluation_sampler, training_sampler
from .sources import load_digits_tensors, load_npz_inputs, load_npz_tensors


def stratified_split(
    labels: torch.Tensor, val_fraction: float, test_fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices of disjoint train/val/test sets with every class in the same proportions."""
    generator = torch.Generator().manual_seed(seed)
    splits: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] = ([], [], [])
    for label in labels.unique():
        members = (labels == label).nonzero().squeeze(1)
        members = members[torch.randperm(len(members), generator=generator)]
        n_test = round(len(members) * test_fraction)
        n_val = round(len(members) * val_fraction)
        splits[2].append(members[:n_test])
        splits[1].append(members[n_test : n_test + n_val])
        splits[0].append(members[n_test + n_val :])
    return tuple(torch.cat(parts).sort().values for parts in splits)  # type: ignore[return-value]


class DigitsDataModule(L.LightningDataModule):
    """Handwritten digits (1x8x8 images, 10 classes), held in memory.

    `batch_size` is per device: with `--trainer.devices=4` each optimizer step sees
    4 x batch_size samples. The split depends only on `seed`, never on the global seed, so
    every run and every DDP rank sees the same train/val/test sets.
    """

    image_shape: tuple[int, ...] = (1, 8, 8)
    num_classes = 10
    # What a raw image goes through before the model sees it (written into exported models' metadata).
    preprocessing = (
        "pixels as float32 in [0, 1]: uint8 images divided by 255 (the bundled digits, 0-16, by 16)"
    )

    def __init__(
        self,
        batch_size: int | Literal["auto"] = 64,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        seed: int = 0,
        data_path: Path | None = None,
        predict_path: Path | None = None,
    ) -> None:
        """
        Args:
            batch_size: Samples per batch on each device, or `auto`: the largest that fits in
                memory, found when `fit` starts (`kit.tuning.BatchSizeTuner`, `--tuner.*`).
            num_workers: Loader worker processes. 0 suits in-memory data (batches are a
                tensor index away); raise it when loading from disk is the bottleneck.
            pin_memory: Page-locked host memory for faster copies to a GPU. `None`
                turns it on exactly when training on a GPU.
            val_fraction: Share of the data held out for validation.
            test_fraction: Share of the data held out for the final test.
            seed: Fixes the split and the shuffling order.
            data_path: An .npz file of your own (see `sources.py`); unset: the bundled digits.
            predict_path: The images `predict` runs on: an .npz file with an `images` array
                (labels optional) like `data_path`'s; unset: the test split.
        """
        super().__init__()
        if not (batch_size == "auto" or (isinstance(batch_size, int) and batch_size >= 1)):
            raise ValueError(f"batch_size must be a positive integer or 'auto', got {batch_size!r}.")
        if num_workers < 0:
            raise ValueError(f"num_workers must be 0 or more, got {num_workers}.")
        if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must each lie "
                "between 0 and 1 and leave data for training (sum below 1), e.g. 0.1 and 0.2."
            )
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.seed = seed
        self.data_path = data_path
        self.predict_path = predict_path
        if data_path is not None:  # the model is built from these, so read them up front
            images, labels = load_npz_tensors(data_path)
            self.image_shape = tuple(images.shape[1:])
            self.num_classes = int(labels.max()) + 1
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    def prepare_data(self) -> None:
        """Download or unpack data to disk. Lightning calls this on one process per node.

        Nothing to do for the digits, which ship inside scikit-learn. Never set attributes
        here: under DDP the other ranks would never see them. Put that in `setup`.
        """

    def setup(self, stage: str) -> None:
        """Load the data and build the splits. Lightning calls this on every process (rank)."""
        if self.train_set is not None:
            return
        images, labels = load_digits_tensors() if self.data_path is None else load_npz_tensors(self.data_path)
        train, val, test = stratified_split(labels, self.val_fraction, self.test_fraction, self.seed)
        sizes = {"train": len(train), "val": len(val), "test": len(test)}
        check_split_sizes(sizes, f"data file {self.data_path}" if self.data_path else "the digits")
        # A TensorDataset that also serves whole batches at once (any Dataset works here).
        self.train_set = TensorBatchDataset(images[train], labels[train])
        self.val_set = TensorBatchDataset(images[val], labels[val])
        self.test_set = TensorBatchDataset(images[test], labels[test])

    def train_dataloader(self) -> StatefulDataLoader:
        # Each rank's share of a shuffle that depends on (seed, epoch) alone: a resumed run
        # replays it exactly.
        assert self.train_set is not None, "setup() must run before the loaders are built"
        return self._loader(self.train_set, sampler=training_sampler(self.train_set, self.trainer, self.seed))

    # Under DDP every evaluation sample is seen once, so metrics do not depend on the device count.
    def val_dataloader(self) -> StatefulDataLoader:
        return self._loader(self.val_set, sampler=evaluation_sampler(self.val_set, self.trainer))

    def test_dataloader(self) -> StatefulDataLoader:
        return self._loader(self.test_set, sampler=evaluation_sampler(self.test_set, self.trainer))

    def predict_dataloader(self) -> StatefulDataLoader:
        dataset = self.test_set
        if self.predict_path is not None:  # a file of your own, checked against the model's input
            images, labels = load_npz_inputs(self.predict_path, self.image_shape)
            dataset = TensorBatchDataset(images) if labels is None else TensorBatchDataset(images, labels)
        return self._loader(dataset, sampler=evaluation_sampler(dataset, self.trainer))

    def _loader(self, dataset: Dataset | None, sampler: Sampler | None = None) -> StatefulDataLoader:
        """A plain DataLoader that can also say where it is in the epoch.

        `StatefulDataLoader` (torchdata) is a drop-in `DataLoader` with `state_dict()`: Lightning
        stores it in every checkpoint and restores it on `--ckpt_path`, so a run resumed
        mid-epoch continues with the very next batch.
        """
        assert dataset is not None, "setup() must run before the loaders are built"
        if self.batch_size == "auto":
            raise ValueError(
                "batch_size=auto is resolved only by `fit` with kit.tuning.BatchSizeTuner (the CLI adds it). "
                "Pass a number, e.g. the one fit chose: it is in the run's config.yaml."
            )
        trainer = self.trainer
        on_gpu = trainer is not None and trainer.strategy.root_device.type == "cuda"
        return StatefulDataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            pin_memory=on_gpu if self.pin_memory is None else self.pin_memory,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate,  # default_collate, plus whole batches from TensorBatchDataset
            # Worker seeds from a generator of its own: iterating leaves the global random
            # state (dropout masks) alone.
            generator=torch.Generator().manual_seed(self.seed),
        )
