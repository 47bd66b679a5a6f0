"""The data: scikit-learn's bundled diabetes records or a .csv file of your own, and their fixed splits.

`KitDataModule` builds the loaders (resumable, DDP-aware, `--data.batch_size=auto`) from the
datasets that `setup` assigns; any map-style `torch.utils.data.Dataset` works there. The model and
network take `num_features` from here (`model_links`), so they never disagree, and the model
standardises with `standardization()`, measured on the training split alone.
"""

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from .kit.datamodule import KitDataModule

CSV_FORMAT = "a .csv file with a header row of column names, one row per sample, numbers only"


def load_diabetes() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Scikit-learn's diabetes data (shipped inside the package): 442 patients' ten measurements
    in their own units (age in years, BMI, blood pressure, six blood serum values), and a measure
    of disease progression one year later."""
    try:
        from sklearn.datasets import load_diabetes as sklearn_diabetes  # only data loading needs it

        diabetes = sklearn_diabetes(scaled=False)
    except (ImportError, OSError, ValueError) as error:
        raise ValueError(
            f"scikit-learn's diabetes data is unreadable ({error}): reinstall scikit-learn"
        ) from None
    return diabetes.data.astype(np.float32), diabetes.target.astype(np.float32), list(diabetes.feature_names)


def load_csv(path: Path, what: str) -> tuple[np.ndarray, list[str]]:
    """The numbers in `path`, one row per sample, and the column names of its header."""
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist: pass {CSV_FORMAT}")
    try:
        with path.open(encoding="utf-8") as lines:
            columns = [name.strip() for name in lines.readline().split(",")]
            values = np.loadtxt(lines, delimiter=",", dtype=np.float32, ndmin=2)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} {path} is not {CSV_FORMAT} ({error})") from None
    if values.size and values.shape[1] != len(columns):
        raise ValueError(f"{what} {path}: {values.shape[1]} values a row under {len(columns)} column names")
    return values, columns


def load_table(path: Path, target_column: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features, targets and feature names from a .csv file whose `target_column` is the target."""
    values, columns = load_csv(path, "data file")
    if target_column not in columns:
        raise ValueError(
            f"data file {path} has no column {target_column!r} (it has {', '.join(columns)}): "
            "name the target with --data.target_column"
        )
    target = columns.index(target_column)
    features = [name for name in columns if name != target_column]
    return np.delete(values, target, axis=1), values[:, target], features


def random_split(samples: int, val_fraction: float, test_fraction: float, seed: int) -> list[Tensor]:
    """Indices of disjoint train/val/test sets, shuffled by `seed` alone."""
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed))
    n_test, n_val = round(samples * test_fraction), round(samples * val_fraction)
    parts = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    return [part.sort().values for part in (parts[2], parts[1], parts[0])]


class DiabetesDataModule(KitDataModule):
    """Tabular regression: ten float features a patient, one float target, held in memory.

    The split depends only on `seed`, so every run and every DDP rank sees the same sets.
    """

    model_links = ("num_features",)
    preprocessing = "none: the model standardises features in their own units (a .csv row as it is)"

    def __init__(
        self,
        batch_size: int | Literal["auto"] = 32,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.2,
        seed: int = 0,
        data_path: Path | None = None,
        target_column: str = "target",
        predict_path: Path | None = None,
    ) -> None:
        """`val_fraction`/`test_fraction`: shares of the data held out; `data_path`: a .csv file
        (`CSV_FORMAT`) with the target in column `target_column`, unset: the diabetes data;
        `predict_path`: a .csv of the same feature columns for `predict` (the target column
        optional), unset: the test split. The other arguments: see `KitDataModule`."""
        super().__init__(batch_size, num_workers, pin_memory, seed)
        self.check_split_fractions(val_fraction, test_fraction)
        if data_path is None and target_column != "target":
            raise ValueError("--data.target_column names the target of a --data.data_path file; pass one.")
        self.save_hyperparameters()
        # Read and checked here, not in `setup`: the model is built from the number of features,
        # and bad data should stop the run before anything starts.
        source = "the diabetes data" if data_path is None else f"data file {data_path}"
        features, targets, self.feature_names = (
            load_diabetes() if data_path is None else load_table(data_path, target_column)
        )
        self.features = self.checked_targets(features, source, what="feature")
        self.targets = self.checked_targets(targets, source)
        self.num_features = self.features.shape[1]
        self.splits = random_split(len(self.targets), val_fraction, test_fraction, seed)
        sizes = dict(zip(("train", "val", "test"), map(len, self.splits), strict=True))
        self.check_split_sizes(sizes, source)
        if predict_path is not None:  # checked now, before any training
            self.predict_set = self.predict_rows(predict_path, target_column)

    def predict_rows(self, path: Path, target_column: str) -> TensorDataset:
        """The rows of a predict file: the training features by name, the target if present."""
        values, columns = load_csv(path, "predict file")
        missing = [name for name in self.feature_names if name not in columns]
        if missing:
            raise ValueError(f"predict file {path} lacks the feature column(s) {', '.join(missing)}")
        source = f"predict file {path}"
        in_training_order = values[:, [columns.index(name) for name in self.feature_names]]
        features = self.checked_targets(in_training_order, source, "feature")
        if target_column not in columns:
            return TensorDataset(features)
        return TensorDataset(features, self.checked_targets(values[:, columns.index(target_column)], source))

    def standardization(self) -> dict[str, Tensor]:
        """Mean and standard deviation of the training split's features and target: what the
        model subtracts and divides by, so the network sees numbers near 0 whatever their units."""
        features, targets = self.features[self.splits[0]], self.targets[self.splits[0]]
        return {
            "feature_mean": features.mean(dim=0),
            "feature_std": features.std(dim=0).clamp_min(1e-6),  # a constant column stays finite
            "target_mean": targets.mean(),
            "target_std": targets.std().clamp_min(1e-6),
        }

    def setup(self, stage: str) -> None:
        """The datasets the kit loads from. Lightning calls this on every process (rank)."""
        # Any map-style Dataset works here; the kit serves a TensorDataset's batches whole.
        self.train_set, self.val_set, self.test_set = (
            TensorDataset(self.features[split], self.targets[split]) for split in self.splits
        )
