"""`KitDataModule`: what any subclass gets from the kit's loaders, specified on the kit's fixtures."""

import json
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from {{ cookiecutter.package_name }}.kit.data_checks import DataError
from {{ cookiecutter.package_name }}.kit.datamodule import KitDataModule, TensorBatchDataset, collate

from kit_fixtures import CLASSES, FEATURES, SAMPLES, Blobs
from kit_testing import run_fixtures


def blobs(**settings) -> Blobs:
    datamodule = Blobs(**settings)
    datamodule.setup("fit")
    return datamodule


def as_rank(datamodule: KitDataModule, rank: int, world_size: int, epoch: int = 0) -> KitDataModule:
    """The DataModule as Lightning hands it to rank `rank` of a DDP run on CPUs."""
    device = SimpleNamespace(type="cpu")
    trainer = SimpleNamespace(world_size=world_size, global_rank=rank, current_epoch=epoch)
    datamodule.trainer = SimpleNamespace(**vars(trainer), strategy=SimpleNamespace(root_device=device))  # type: ignore[assignment]
    return datamodule


def epoch_labels(loader) -> list[int]:
    return [label for _, labels in loader for label in labels.tolist()]


def test_loaders_yield_batches_of_the_declared_size_and_drop_a_partial_training_one():
    datamodule = blobs(batch_size=50)
    points, labels = next(iter(datamodule.train_dataloader()))
    assert points.shape == (50, FEATURES) and labels.shape == (50,)
    assert len(datamodule.train_dataloader()) == SAMPLES // 50, "drop_last: no partial training batch"
    assert sum(len(labels) for _, labels in datamodule.val_dataloader()) == len(datamodule.val_set)


def test_predict_runs_on_the_test_set_unless_a_predict_set_is_assigned():
    datamodule = blobs(batch_size=8)
    assert datamodule.predict_dataloader().dataset.tensors[0] is datamodule.test_set.tensors[0]
    datamodule.predict_set = TensorDataset(torch.zeros(3, FEATURES))
    assert [len(batch[0]) for batch in datamodule.predict_dataloader()] == [3]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_train_loader_resumes_mid_epoch_from_its_state(num_workers):
    """What Lightning stores in a checkpoint is enough to continue with the very next batch."""
    datamodule = blobs(batch_size=16, num_workers=num_workers)
    uninterrupted = epoch_labels(datamodule.train_dataloader())
    interrupted = datamodule.train_dataloader()
    batches = iter(interrupted)
    seen = [label for _ in range(3) for label in next(batches)[1].tolist()]
    resumed = datamodule.train_dataloader()
    resumed.load_state_dict(interrupted.state_dict())
    assert seen + epoch_labels(resumed) == uninterrupted


def test_the_shuffle_depends_only_on_seed_and_epoch():
    orders = []
    for global_seed, epoch in ((1, 0), (2, 0), (1, 1)):
        torch.manual_seed(global_seed)  # the global seed must not matter
        orders.append(epoch_labels(as_rank(blobs(batch_size=16), 0, 1, epoch).train_dataloader()))
    assert orders[0] == orders[1] != orders[2]


def test_two_ranks_share_each_epoch_of_training_between_them():
    ranks = [as_rank(blobs(batch_size=10, samples=21), rank, 2) for rank in (0, 1)]
    indices = [list(datamodule.train_dataloader().sampler) for datamodule in ranks]
    # 21 samples: DistributedSampler repeats one, so that both ranks take as many steps.
    assert len(indices[0]) == len(indices[1]) == 11
    assert len(set(indices[0]) & set(indices[1])) == 1
    assert set(indices[0]) | set(indices[1]) == set(range(21))


@pytest.mark.parametrize("world_size", [2, 3])
def test_under_ddp_every_evaluation_sample_is_seen_exactly_once(world_size):
    ranks = [as_rank(blobs(batch_size=4, samples=22), rank, world_size) for rank in range(world_size)]
    size = len(ranks[0].val_set)
    for loader in ("val_dataloader", "test_dataloader", "predict_dataloader"):
        shares = [list(getattr(datamodule, loader)().sampler) for datamodule in ranks]
        assert sorted(index for share in shares for index in share) == list(range(size)), loader


def test_a_tensor_dataset_loads_whole_batches_like_per_sample_loading():
    points, labels = torch.randn(50, 1, 4, 4), torch.randint(0, 3, (50,))

    def batches(dataset):
        generator = torch.Generator().manual_seed(0)
        return list(DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate, generator=generator))

    stacked, per_sample = batches(TensorBatchDataset(points, labels)), batches(TensorDataset(points, labels))
    assert len(stacked) == len(per_sample) == 7 and stacked[-1][0].shape == (2, 1, 4, 4)
    for (x, y), (x_ref, y_ref) in zip(stacked, per_sample, strict=True):
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)


class Files(Dataset):
    """A map-style Dataset as users write them: one sample per file, read in `__getitem__(int)`."""

    def __init__(self, folder, as_dict: bool) -> None:
        self.files, self.as_dict = sorted(folder.glob("*.npz")), as_dict

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        with np.load(self.files[index]) as sample:
            point, label = torch.from_numpy(sample["point"]), int(sample["label"])
        return {"point": point, "label": label} if self.as_dict else (point, label)


@pytest.mark.parametrize("as_dict", [False, True], ids=["tuples", "dicts"])
def test_any_map_style_dataset_loads_with_workers_as_tuples_or_dicts(tmp_path, as_dict):
    for index in range(10):
        np.savez(tmp_path / f"{index}.npz", point=np.full(FEATURES, index, np.float32), label=index % CLASSES)
    datamodule = Blobs(batch_size=4, num_workers=2)
    datamodule.train_set = Files(tmp_path, as_dict)
    batches = list(datamodule.train_dataloader())
    points, labels = (batches[0]["point"], batches[0]["label"]) if as_dict else batches[0]
    assert points.shape == (4, FEATURES) and labels.dtype == torch.int64
    assert len(batches) == 2, "10 samples, batches of 4, the partial one dropped"


@pytest.mark.parametrize("settings", [{"batch_size": 0}, {"batch_size": "big"}, {"num_workers": -1}])
def test_bad_settings_are_refused_naming_the_flag(settings):
    flag, value = next(iter(settings.items()))
    with pytest.raises(ValueError, match=rf"--data\.{flag} .*{value}"):
        Blobs(**settings)


def test_batch_size_auto_is_for_fit_only_and_the_error_says_what_to_pass():
    """Only `fit` resolves it (the kit's BatchSizeTuner); any loader before that refuses it."""
    datamodule = blobs(batch_size="auto")
    with pytest.raises(ValueError, match=r"resolved by `fit` only; pass a number"):
        datamodule.val_dataloader()


def test_a_missing_dataset_is_named():
    datamodule = blobs()
    datamodule.val_set = None
    with pytest.raises(ValueError, match=r"Blobs.setup\(\) assigned no val_set"):
        datamodule.val_dataloader()


def test_the_data_checks_are_there_for_any_subclass():
    datamodule = Blobs()
    assert datamodule.checked_class_labels(np.array([0, 2, 1]), "mine").dtype == torch.int64
    with pytest.raises(DataError, match=r"mine: labels run 0..2 but classes 1 have no sample"):
        datamodule.checked_class_labels(np.array([0, 2, 2]), "mine")
    assert datamodule.checked_targets(np.array([[0.5], [2]]), "mine").dtype == torch.float32
    with pytest.raises(DataError, match=r"mine: 1 NaN or infinite target value\(s\), the first at index 1"):
        datamodule.checked_targets(np.array([0.5, np.inf]), "mine")
    with pytest.raises(DataError, match=r"mine: too few samples to split \(train 3, val 0\)"):
        datamodule.check_split_sizes({"train": 3, "val": 0}, "mine")
    datamodule.check_split_fractions(0.1, 0.2)
    with pytest.raises(ValueError, match=r"--data\.test_fraction must lie between 0 and 1"):
        datamodule.check_split_fractions(0.1, 1.0)
    with pytest.raises(ValueError, match=r"--data\.val_fraction \+ --data\.test_fraction must be below 1"):
        datamodule.check_split_fractions(0.5, 0.5)


class SeenSamples(L.Callback):
    """Writes `rank<N>.json`: how many validation samples this DDP rank evaluated."""

    def __init__(self) -> None:
        self.seen = 0

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, *indices) -> None:
        self.seen += len(batch[1])

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(f"rank{trainer.global_rank}.json").write_text(json.dumps(self.seen))


@pytest.mark.slow
def test_validate_under_ddp_evaluates_each_sample_once_through_the_kits_cli(tmp_path):
    """61 validation samples on 2 ranks: 31 + 30, where a padding sampler would evaluate 62."""
    ddp = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
    report = "--trainer.callbacks+=test_datamodule.SeenSamples"
    result = run_fixtures(tmp_path, "validate", *ddp, "--data.samples=244", report, "--trainer.logger=false")
    assert result.returncode == 0, result.stderr[-4000:]
    seen = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(seen) == [30, 31]
