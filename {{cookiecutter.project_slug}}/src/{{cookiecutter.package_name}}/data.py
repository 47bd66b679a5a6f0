"""The LightningDataModule: the digits data, its fixed splits and its loaders.

Replace `load_digits_tensors` and the class attributes `image_shape`/`num_classes` to train on
your own data; the CLI links both attributes into the model.
"""

import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from .batching import batched_loader, batches_already_trained

# A run resumed mid-epoch skips the batches it already trained on (see `train_dataloader`), so
# Lightning's generic warning about non-resumable loaders does not apply to this DataModule.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch")


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """Scikit-learn's 8x8 handwritten digits as (images scaled to [0, 1], labels).

    The 1,797 images ship inside scikit-learn, so no download is ever needed.
    """
    from sklearn.datasets import load_digits  # imported here: only data loading needs it

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return images, torch.tensor(digits.target, dtype=torch.long)


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

    image_shape = (1, 8, 8)
    num_classes = 10

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        seed: int = 0,
    ) -> None:
        """
        Args:
            batch_size: Samples per batch on each device.
            num_workers: Loader worker processes. 0 suits in-memory data (batches are a
                tensor index away); raise it when loading from disk is the bottleneck.
            pin_memory: Page-locked host memory for faster copies to a GPU. `None`
                turns it on exactly when training on a GPU.
            val_fraction: Share of the data held out for validation.
            test_fraction: Share of the data held out for the final test.
            seed: Fixes the split and the shuffling order.
        """
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
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
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None

    def prepare_data(self) -> None:
        """Download or unpack data to disk. Lightning calls this on one process per node.

        Nothing to do for the digits, which ship inside scikit-learn. Never set attributes
        here: under DDP the other ranks would never see them. Put that in `setup`.
        """

    def setup(self, stage: str) -> None:
        """Load the data and build the splits. Lightning calls this on every process (rank)."""
        if self.train_set is not None:
            return
        images, labels = load_digits_tensors()
        train, val, test = stratified_split(labels, self.val_fraction, self.test_fraction, self.seed)
        self.train_set = TensorDataset(images[train], labels[train])
        self.val_set = TensorDataset(images[val], labels[val])
        self.test_set = TensorDataset(images[test], labels[test])

    def train_dataloader(self) -> DataLoader:
        loader = self._loader(self.train_set, shuffle=True)
        loader.sampler.skip_batches = batches_already_trained(self.trainer)
        return loader

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def _loader(self, dataset: TensorDataset | None, shuffle: bool) -> DataLoader:
        assert dataset is not None, "setup() must run before the loaders are built"
        trainer = self.trainer
        on_gpu = trainer is not None and trainer.strategy.root_device.type == "cuda"
        return batched_loader(
            dataset,
            self.batch_size,
            shuffle=shuffle,
            num_replicas=trainer.world_size if trainer is not None else 1,
            rank=trainer.global_rank if trainer is not None else 0,
            seed=self.seed,
            num_workers=self.num_workers,
            pin_memory=on_gpu if self.pin_memory is None else self.pin_memory,
        )
