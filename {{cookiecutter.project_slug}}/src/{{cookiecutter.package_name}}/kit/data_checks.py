"""Checks on data as it is loaded, so bad data fails in one line before training.

Any DataModule can call them (a `KitDataModule` subclass has them as methods): images for any
task, class labels for classification, float targets for regression. Without them, a label of
-1 fails mid-training with a long IndexError, a stray label of 50 silently builds a 51-class
model, float labels are truncated, 0-255 images train unscaled and a NaN turns the loss into NaN
at the first step.
"""

from collections.abc import Mapping

import numpy as np
import torch

from .errors import KitError


class DataError(KitError, ValueError):
    """The data cannot train the model as it is; the message names the source and the fix."""


def checked_images(images: np.ndarray, source: str) -> torch.Tensor:
    """float32 images in [0, 1]: integer images (0-255) are scaled; NaN, inf and 0-255 floats refused."""
    if len(images) == 0:
        raise DataError(f"{source}: holds no samples")
    if images.dtype.kind in "ui":
        if images.size and (images.min() < 0 or images.max() > 255):
            raise DataError(
                f"{source}: integer images must lie in 0..255, found {images.min()}..{images.max()}"
            )
        return torch.as_tensor(images.astype(np.float32) / 255.0)
    if images.dtype.kind != "f":
        raise DataError(f"{source}: images are {images.dtype}, not numbers; save them as uint8 or float32")
    bad = ~np.isfinite(images)
    if bad.any():
        samples = np.unique(np.nonzero(bad)[0])
        raise DataError(
            f"{source}: {bad.sum()} NaN or infinite pixel values in {len(samples)} image(s), the first at "
            f"index {samples[0]}; fix or drop those images"
        )
    if (
        images.size
        and images.max() > 1.5
        and np.array_equal(images, np.round(images))
        and images.max() <= 255
    ):
        raise DataError(
            f"{source}: float images hold whole numbers up to {images.max():g}, i.e. 0..255 pixel values; "
            "divide by 255 (or save them as uint8, which is scaled for you)"
        )
    return torch.as_tensor(images, dtype=torch.float32)


def checked_labels(labels: np.ndarray, source: str) -> torch.Tensor:
    """int64 class indices 0..K-1 with every class present and at least two classes."""
    if labels.dtype.kind not in "uif" and labels.dtype != bool:
        raise DataError(
            f"{source}: labels are {labels.dtype} (e.g. '{labels.flat[0]}'), not class numbers; "
            "map each class name to 0..K-1 first"
        )
    if labels.dtype.kind == "f" and not np.array_equal(labels, np.round(labels)):
        fraction = labels[labels != np.round(labels)][0]
        raise DataError(f"{source}: labels must be whole class numbers 0..K-1, found {fraction}")
    labels = labels.astype(np.int64)
    if labels.size == 0:
        raise DataError(f"{source}: holds no samples")
    if labels.min() < 0:
        raise DataError(f"{source}: label {labels.min()} is negative; classes are numbered 0..K-1")
    present = np.unique(labels)
    if len(present) < 2:
        raise DataError(f"{source}: every label is {present[0]}; a classifier needs at least two classes")
    missing = sorted(set(range(int(labels.max()) + 1)) - set(present.tolist()))
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise DataError(
            f"{source}: labels run 0..{labels.max()} but classes {shown} have no sample "
            f"({len(missing)} of {labels.max() + 1}); renumber the classes 0..K-1 without gaps"
        )
    return torch.as_tensor(labels)


def checked_targets(targets: np.ndarray, source: str, what: str = "target") -> torch.Tensor:
    """float32 numbers, one row per sample, none NaN or infinite: regression targets, or
    tabular features (`what="feature"`, named in the message)."""
    if targets.dtype.kind not in "uif":
        raise DataError(f"{source}: {what}s are {targets.dtype}, not numbers")
    if targets.size == 0:
        raise DataError(f"{source}: holds no samples")
    bad = ~np.isfinite(targets.astype(np.float64))
    if bad.any():
        first = np.nonzero(bad.reshape(len(targets), -1).any(axis=1))[0][0]
        raise DataError(f"{source}: {bad.sum()} NaN or infinite {what} value(s), the first at index {first}")
    return torch.as_tensor(targets, dtype=torch.float32)


def check_split_fractions(val_fraction: float, test_fraction: float) -> None:
    """The shares held out for validation and test: each in (0, 1), leaving data to train on."""
    for flag, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < fraction < 1:
            raise ValueError(f"--data.{flag} must lie between 0 and 1, e.g. 0.1; got {fraction}.")
    if val_fraction + test_fraction >= 1:
        raise ValueError("--data.val_fraction + --data.test_fraction must be below 1: data to train on.")


def check_split_sizes(sizes: Mapping[str, int], source: str) -> None:
    """Every split needs a sample, or fit has nothing to validate (and no best checkpoint)."""
    empty = [name for name, size in sizes.items() if size == 0]
    if empty:
        listing = ", ".join(f"{name} {size}" for name, size in sizes.items())
        raise DataError(
            f"{source}: too few samples to split ({listing}): the {' and '.join(empty)} split(s) would be "
            "empty; add data or change val_fraction/test_fraction"
        )
