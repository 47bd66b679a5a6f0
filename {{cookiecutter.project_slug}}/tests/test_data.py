"""The example's DataModule: the digits' splits, your own .npz files, its settings."""

import numpy as np
import pytest
import torch

from {{ cookiecutter.package_name }}.data import DigitsDataModule


@pytest.fixture(scope="module")
def datamodule() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=50)
    dm.setup("fit")
    return dm


def sample_keys(dataset) -> set[bytes]:
    return {image.numpy().tobytes() for image in dataset.tensors[0]}


def test_splits_have_the_right_sizes(datamodule):
    sizes = [len(datamodule.train_set), len(datamodule.val_set), len(datamodule.test_set)]
    assert sum(sizes) == 1797
    assert sizes[1] == pytest.approx(0.1 * 1797, abs=10)
    assert sizes[2] == pytest.approx(0.2 * 1797, abs=10)


def test_splits_are_disjoint(datamodule):
    train, val, test = map(sample_keys, (datamodule.train_set, datamodule.val_set, datamodule.test_set))
    assert not train & val and not train & test and not val & test


def test_every_class_appears_in_every_split(datamodule):
    for dataset in (datamodule.train_set, datamodule.val_set, datamodule.test_set):
        assert set(dataset.tensors[1].tolist()) == set(range(10))


def test_split_depends_only_on_its_seed():
    first, second = DigitsDataModule(seed=3), DigitsDataModule(seed=3)
    torch.manual_seed(123)  # the global seed must not matter
    first.setup("fit")
    torch.manual_seed(456)
    second.setup("fit")
    assert torch.equal(first.test_set.tensors[0], second.test_set.tensors[0])


def test_the_model_is_told_the_digits_shape_and_classes(datamodule):
    assert (datamodule.image_shape, datamodule.num_classes) == ((1, 8, 8), 10)
    images, _ = next(iter(datamodule.train_dataloader()))
    assert images.shape == (50, 1, 8, 8) and images.min() >= 0 and images.max() <= 1


@pytest.mark.parametrize(
    "settings",
    [{"val_fraction": 0.0}, {"test_fraction": 1.5}, {"val_fraction": 0.5, "test_fraction": 0.5}],
)
def test_bad_fractions_are_refused_naming_the_flag(settings):
    with pytest.raises(ValueError, match=rf"--data\.{next(iter(settings))}"):
        DigitsDataModule(**settings)


def test_an_npz_file_of_your_own_sets_shape_and_classes(tmp_path):
    path = tmp_path / "mine.npz"
    np.savez(path, images=np.random.rand(100, 3, 6, 6).astype("float32"), labels=np.arange(100) % 4)
    dm = DigitsDataModule(data_path=path, batch_size=10)
    assert dm.image_shape == (3, 6, 6) and dm.num_classes == 4
    dm.setup("fit")
    images, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (10, 3, 6, 6)


def test_a_missing_data_file_is_named_in_the_error(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.npz does not exist"):
        DigitsDataModule(data_path=tmp_path / "missing.npz")


@pytest.mark.parametrize("content", [b"not a zip file", b"PK\x03\x04 truncated"])
def test_a_corrupt_data_file_is_named_in_the_error(tmp_path, content):
    path = tmp_path / "broken.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"broken\.npz is not an \.npz file with arrays"):
        DigitsDataModule(data_path=path)


def test_a_predict_file_is_checked_against_the_model_input_and_predicted_on(tmp_path):
    path = tmp_path / "new.npz"
    np.savez(path, images=np.zeros((3, 1, 6, 6), np.uint8))
    with pytest.raises(ValueError, match=r"new\.npz holds images \(3, 1, 6, 6\); the model takes"):
        DigitsDataModule(predict_path=path)
    np.savez(path, images=np.zeros((3, 1, 8, 8), np.uint8), labels=np.array([1, 1, 2]))
    dm = DigitsDataModule(predict_path=path, batch_size=10)
    dm.setup("predict")
    images, labels = next(iter(dm.predict_dataloader()))
    assert images.shape == (3, 1, 8, 8) and labels.tolist() == [1, 1, 2]
