from types import SimpleNamespace

import numpy as np
import pytest
import torch

from {{ cookiecutter.package_name }}.data import DigitsDataModule
from {{ cookiecutter.package_name }}.sources import DataSourceError


@pytest.fixture(scope="module")
def datamodule() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=50)
    dm.setup("fit")
    return dm


def sample_keys(dataset) -> set[bytes]:
    images = dataset.tensors[0]
    return {image.numpy().tobytes() for image in images}


def test_splits_have_the_right_sizes(datamodule):
    sizes = [len(datamodule.train_set), len(datamodule.val_set), len(datamodule.test_set)]
    assert sum(sizes) == 1797
    assert sizes[1] == pytest.approx(0.1 * 1797, abs=10)
    assert sizes[2] == pytest.approx(0.2 * 1797, abs=10)


def test_splits_are_disjoint(datamodule):
    train, val, test = (
        sample_keys(d) for d in (datamodule.train_set, datamodule.val_set, datamodule.test_set)
    )
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


def test_loader_yields_whole_batches_scaled_to_unit_range(datamodule):
    images, labels = next(iter(datamodule.train_dataloader()))
    assert images.shape == (50, 1, 8, 8) and labels.shape == (50,)
    assert images.dtype == torch.float32 and images.min() >= 0 and images.max() <= 1
    assert len(datamodule.train_dataloader()) == -(-len(datamodule.train_set) // 50)


def as_rank(datamodule: DigitsDataModule, rank: int, world_size: int) -> DigitsDataModule:
    """The DataModule as Lightning hands it to rank `rank` of a DDP run on CPUs."""
    device = SimpleNamespace(type="cpu")
    datamodule.trainer = SimpleNamespace(
        world_size=world_size, global_rank=rank, current_epoch=0, strategy=SimpleNamespace(root_device=device)
    )
    return datamodule


def epoch_labels(loader) -> list[int]:
    return [label for _, labels in loader for label in labels.tolist()]


def test_two_ranks_split_each_epoch_between_them_and_reshuffle_per_epoch():
    ranks = [as_rank(DigitsDataModule(batch_size=50), rank, 2) for rank in (0, 1)]
    for datamodule in ranks:
        datamodule.setup("fit")
    loaders = [datamodule.train_dataloader() for datamodule in ranks]
    indices = [list(loader.sampler) for loader in loaders]
    # 1,259 training samples: DistributedSampler repeats one so that both ranks take 630 steps.
    assert len(indices[0]) == len(indices[1]) == 630
    assert len(set(indices[0]) & set(indices[1])) == 1
    assert set(indices[0]) | set(indices[1]) == set(range(len(ranks[0].train_set)))
    for loader in loaders:
        loader.sampler.set_epoch(1)
    assert list(loaders[0].sampler) != indices[0]


def test_the_train_loader_resumes_mid_epoch_from_its_state(datamodule):
    """What Lightning stores in a checkpoint is enough to continue with the very next batch."""
    uninterrupted = epoch_labels(datamodule.train_dataloader())
    interrupted = datamodule.train_dataloader()
    batches = iter(interrupted)
    seen = [label for _ in range(3) for label in next(batches)[1].tolist()]
    resumed = datamodule.train_dataloader()
    resumed.load_state_dict(interrupted.state_dict())
    assert seen + epoch_labels(resumed) == uninterrupted


class OneByOneFiles(torch.utils.data.Dataset):
    """A map-style Dataset as users write them: one sample per file, read in `__getitem__(int)`."""

    def __init__(self, folder):
        self.files = sorted(folder.glob("*.npz"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        with np.load(self.files[index]) as sample:
            return torch.from_numpy(sample["image"]), int(sample["label"])


def test_any_map_style_dataset_loads_through_the_datamodule_loaders(tmp_path):
    for index in range(10):
        np.savez(tmp_path / f"{index}.npz", image=np.full((1, 8, 8), index, np.float32), label=index % 3)
    datamodule = DigitsDataModule(batch_size=4, num_workers=2)
    datamodule.train_set = OneByOneFiles(tmp_path)
    images, labels = next(iter(datamodule.train_dataloader()))
    assert images.shape == (4, 1, 8, 8) and labels.dtype == torch.int64
    assert sorted(epoch_labels(datamodule.train_dataloader())) == sorted(i % 3 for i in range(10))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"batch_size": "big"},
        {"num_workers": -1},
        {"val_fraction": 0.0},
        {"val_fraction": 0.5, "test_fraction": 0.5},
    ],
)
def test_bad_settings_are_refused_with_the_value_named(kwargs):
    with pytest.raises(ValueError, match=str(next(iter(kwargs.values())))):
        DigitsDataModule(**kwargs)


def test_batch_size_auto_is_only_for_fit_and_the_error_says_what_to_pass():
    """Only `fit` runs the search (the kit's BatchSizeTuner); other loaders need a number."""
    datamodule = DigitsDataModule(batch_size="auto")
    datamodule.setup("test")
    with pytest.raises(ValueError, match=r"resolved only by `fit`.*Pass a number"):
        datamodule.test_dataloader()


def test_an_npz_file_of_your_own_sets_shape_and_classes(tmp_path):
    path = tmp_path / "mine.npz"
    np.savez(path, images=np.random.rand(100, 3, 6, 6).astype("float32"), labels=np.arange(100) % 4)
    dm = DigitsDataModule(data_path=path, batch_size=10)
    assert dm.image_shape == (3, 6, 6) and dm.num_classes == 4
    dm.setup("fit")
    images, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (10, 3, 6, 6)


def test_a_missing_data_file_is_named_in_the_error(tmp_path):
    with pytest.raises(DataSourceError, match=r"missing\.npz does not exist"):
        DigitsDataModule(data_path=tmp_path / "missing.npz")


@pytest.mark.parametrize("content", [b"not a zip file", b"PK\x03\x04 truncated"])
def test_a_corrupt_data_file_is_named_in_the_error(tmp_path, content):
    path = tmp_path / "broken.npz"
    path.write_bytes(content)
    with pytest.raises(DataSourceError, match=r"broken\.npz is not an \.npz file with arrays"):
        DigitsDataModule(data_path=path)
