"""Where the data comes from: scikit-learn's bundled digits, or an .npz file of your own.

Each loader returns (images as float32 (N, C, H, W) in [0, 1], labels as int64 (N,)) and
raises `DataSourceError`, naming the path and the fix, when the source is missing or broken.
"""

import zipfile
from pathlib import Path

import numpy as np
import torch

from .kit.data_checks import checked_images, checked_labels


class DataSourceError(Exception):
    """The data source is missing or unreadable; the message names the path and the fix."""


NPZ_FORMAT = (
    "an .npz file with arrays 'images' (N, C, H, W), floats in [0, 1] or uint8 0-255, "
    "and 'labels' (N,), class numbers 0..K-1"
)


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """Scikit-learn's 8x8 handwritten digits: 1,797 images that ship inside the package."""
    try:
        from sklearn.datasets import load_digits  # imported here: only data loading needs it

        digits = load_digits()
    except ImportError:
        raise DataSourceError("the example data needs scikit-learn: pip install scikit-learn") from None
    except (OSError, ValueError) as error:
        raise DataSourceError(
            f"scikit-learn's bundled digits could not be read ({error}); reinstall it: "
            "pip install --force-reinstall scikit-learn"
        ) from None
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return images, torch.tensor(digits.target, dtype=torch.long)


def load_npz_tensors(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and labels from `path`, checked for the expected format."""
    if not path.is_file():
        raise DataSourceError(f"data file {path} does not exist: pass {NPZ_FORMAT}, or leave data_path unset")
    try:
        arrays = np.load(path, allow_pickle=False)
        if not isinstance(arrays, np.lib.npyio.NpzFile):  # an .npy file: one array, no labels
            raise ValueError(f"it holds one array of shape {arrays.shape}, not named arrays")
        with arrays:
            images, labels = arrays["images"], arrays["labels"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise DataSourceError(f"data file {path} is not {NPZ_FORMAT} ({error})") from None
    if images.ndim != 4 or labels.ndim != 1 or len(images) != len(labels):
        raise DataSourceError(
            f"data file {path} holds images {images.shape} and labels {labels.shape}; expected {NPZ_FORMAT}"
        )
    # Label range and type, pixel scale, NaN: one line each, before any training.
    return checked_images(images, f"data file {path}"), checked_labels(labels, f"data file {path}")


def load_npz_inputs(path: Path, image_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Images to predict on (labels too, if the file has them): an .npz file like the training one."""
    expected = f"an .npz file with an array 'images' (N, {', '.join(map(str, image_shape))}) as in training"
    if not path.is_file():
        raise DataSourceError(f"predict file {path} does not exist: pass {expected}")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            images = arrays["images"]
            labels = arrays.get("labels")
    except (OSError, ValueError, KeyError, EOFError, AttributeError, TypeError, zipfile.BadZipFile) as error:
        raise DataSourceError(f"predict file {path} is not {expected} ({error})") from None
    if images.ndim != 1 + len(image_shape) or tuple(images.shape[1:]) != tuple(image_shape):
        raise DataSourceError(f"predict file {path} holds images {images.shape}; the model takes {expected}")
    if labels is not None and (labels.shape != (len(images),) or labels.dtype.kind not in "iu"):
        raise DataSourceError(
            f"predict file {path}: labels {labels.shape} {labels.dtype} are not one class number per image"
        )
    # Labels here are only copied into predictions.csv (a `target` column): any classes may be missing.
    targets = None if labels is None else torch.as_tensor(labels.astype(np.int64))
    return checked_images(images, f"predict file {path}"), targets
