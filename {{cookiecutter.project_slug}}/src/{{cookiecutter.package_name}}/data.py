"""The data: scikit-learn's bundled digits or .npz files of your own, and their fixed splits.

`KitDataModule` builds the loaders (resumable, DDP-aware, `--data.batch_size=auto`) from the
datasets that `setup` assigns; any map-style `torch.utils.data.Dataset` works there. The model
and network take `image_shape` and `num_classes` from here (`model_links`), so they never disagree.
"""

import zipfile
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import TensorDataset

from .kit.datamodule import KitDataModule

NPZ_FORMAT = (
    "an .npz file with arrays 'images' (N, C, H, W), floats in [0, 1] or uint8 0-255, "
    "and 'labels' (N,), class numbers 0..K-1"
)


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Scikit-learn's 8x8 handwritten digits (shipped inside the package): images in [0, 1], labels."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits  # only data loading needs it

        digits = sklearn_digits()
    except (ImportError, OSError, ValueError) as error:
        raise ValueError(f"scikit-learn's digits are unreadable ({error}): reinstall scikit-learn") from None
    return (digits.images[:, None] / 16.0).astype(np.float32), digits.target


def load_npz(path: Path, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Images and labels from `path`; with `shape`, images to predict on: that shape, labels optional."""
    what = "data file" if shape is None else "predict file"
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist: pass {NPZ_FORMAT}")
    try:
        arrays = np.load(path, allow_pickle=False)
        if not isinstance(arrays, np.lib.npyio.NpzFile):  # an .npy file: one array, no labels
            raise ValueError(f"it holds one array of shape {arrays.shape}, not named arrays")
        with arrays:
            images = arrays["images"]
            labels = arrays["labels"] if shape is None or "labels" in arrays else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{what} {path} is not {NPZ_FORMAT} ({error})") from None
    if shape is not None and images.shape[1:] != shape:
        expected = f"an .npz file with an array 'images' (N, {', '.join(map(str, shape))})"
        raise ValueError(f"{what} {path} holds images {images.shape}; the model takes {expected}")
    if images.ndim != 4 or (labels is not None and labels.shape != (len(images),)):
        shapes = f"images {images.shape}" + ("" if labels is None else f" and labels {labels.shape}")
        raise ValueError(f"{what} {path} holds {shapes}; expected {NPZ_FORMAT}")
    if shape is not None and labels is not None and labels.dtype.kind not in "iu":
        raise ValueError(f"{what} {path}: labels {labels.dtype} are not class numbers")
    return images, labels


def stratified_split(labels: torch.Tensor, val_fraction: float, test_fraction: float, seed: int) -> list:
    """Indices of disjoint train/val/test sets with every class in the same proportions."""
    generator = torch.Generator().manual_seed(seed)
    splits: list[list[torch.Tensor]] = [[], [], []]
    for label in labels.unique():
        members = (labels == label).nonzero().squeeze(1)
        members = members[torch.randperm(len(members), generator=generator)]
        n_test, n_val = round(len(members) * test_fraction), round(len(members) * val_fraction)
        splits[2].append(members[:n_test])
        splits[1].append(members[n_test : n_test + n_val])
        splits[0].append(members[n_test + n_val :])
    return [torch.cat(parts).sort().values for parts in splits]


class DigitsDataModule(KitDataModule):
    """Handwritten digits (1x8x8 images, 10 classes), held in memory.

    The split depends only on `seed`, so every run and every DDP rank sees the same sets.
    """

    model_links = ("image_shape", "num_classes")
    preprocessing = "pixels as float32 in [0, 1]: uint8 divided by 255 (the bundled digits, 0-16, by 16)"

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
        """`val_fraction`/`test_fraction`: shares of the data held out; `data_path`: an .npz file
        (`NPZ_FORMAT`), unset: the digits; `predict_path`: images for `predict` (labels optional),
        unset: the test split. The other arguments: see `KitDataModule`."""
        super().__init__(batch_size, num_workers, pin_memory, seed)
        self.check_split_fractions(val_fraction, test_fraction)
        self.save_hyperparameters()
        # Read and checked here, not in `setup`: the model is built from the data's shape, and
        # bad data should stop the run before anything starts.
        source = "the digits" if data_path is None else f"data file {data_path}"
        images, labels = load_digits() if data_path is None else load_npz(data_path)
        self.images = self.checked_images(images, source)
        self.labels = self.checked_class_labels(labels, source)  # type: ignore[arg-type]
        self.image_shape, self.num_classes = tuple(self.images.shape[1:]), int(self.labels.max()) + 1
        self.splits = stratified_split(self.labels, val_fraction, test_fraction, seed)
        self.check_split_sizes(
            dict(zip(("train", "val", "test"), map(len, self.splits), strict=True)), source
        )
        if predict_path is not None:  # checked now, before any training
            images, labels = load_npz(predict_path, self.image_shape)
            inputs = [self.checked_images(images, f"predict file {predict_path}")]
            # Labels are only copied into predictions.csv (`target`): any classes may be missing.
            self.predict_set = TensorDataset(*inputs, *([] if labels is None else [torch.as_tensor(labels)]))

    def setup(self, stage: str) -> None:
        """The datasets the kit loads from. Lightning calls this on every process (rank)."""
        # Any map-style Dataset works here; the kit serves a TensorDataset's batches whole.
        self.train_set, self.val_set, self.test_set = (
            TensorDataset(self.images[split], self.labels[split]) for split in self.splits
        )
