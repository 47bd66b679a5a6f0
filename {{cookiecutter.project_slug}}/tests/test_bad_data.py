"""Bad data files end in one line, exit code 2, naming the file and the fix, before training."""

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.data import DigitsDataModule, load_digits

IMAGES, LABELS = load_digits()
ONE_NAN = np.where(np.arange(len(LABELS))[:, None, None, None] == 7, np.nan, IMAGES).astype(np.float32)
STRAY = np.where(np.arange(len(LABELS)) == 5, 50, LABELS)
NEGATIVE = np.where(np.arange(len(LABELS)) == 5, -1, LABELS)

# name: (images, labels, what the one line must say)
BAD_FILES = {
    "empty": (IMAGES[:0], LABELS[:0], "holds no samples"),
    "string-labels": (IMAGES, LABELS.astype(str), "map each class name to 0..K-1"),
    "float-labels": (IMAGES, LABELS + 0.5, "whole class numbers 0..K-1, found 0.5"),
    "one-class": (IMAGES, np.zeros_like(LABELS), "at least two classes"),
    "negative-label": (IMAGES, NEGATIVE, "label -1 is negative"),
    "stray-label": (IMAGES, STRAY, "labels run 0..50 but classes 10, 11, 12, 13, 14, ... have no sample"),
    "0-255-floats": ((IMAGES * 255).round(), LABELS, "divide by 255"),
    "nan": (ONE_NAN, LABELS, "NaN or infinite pixel values in 1 image(s), the first at index 7"),
    "too-few-to-split": (IMAGES[:4], np.array([0, 1, 0, 1]), "the val and test split(s) would be empty"),
}


@pytest.mark.parametrize("case", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_bad_data_is_refused_in_one_line_naming_the_file(run_main, capsys, tmp_path, case):
    images, labels, expected = case
    path = tmp_path / "mine.npz"
    np.savez(path, images=images, labels=labels)
    with pytest.raises(SystemExit) as stop:
        run_main("fit", f"--data.data_path={path}", "--trainer.max_steps=1")
    assert stop.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith(f"error: data file {path}") and expected in message, message
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_npy_file_is_refused_naming_the_npz_format(run_main, capsys, tmp_path):
    path = tmp_path / "images.npy"
    np.save(path, IMAGES)
    with pytest.raises(SystemExit) as stop:
        run_main("fit", f"--data.data_path={path}")
    assert stop.value.code == 2
    assert "not an .npz file with arrays 'images'" in capsys.readouterr().err


def test_uint8_images_are_scaled_to_the_unit_range(tmp_path):
    path = tmp_path / "bytes.npz"
    np.savez(path, images=(IMAGES * 255).round().astype(np.uint8), labels=LABELS)
    datamodule = DigitsDataModule(data_path=path)
    images, labels = datamodule.images, datamodule.labels
    assert str(images.dtype) == "torch.float32"
    assert float(images.max()) == 1.0 and float(images.min()) == 0.0
    assert np.allclose(images.numpy(), IMAGES, atol=1 / 255)
    assert labels.tolist() == LABELS.tolist()
