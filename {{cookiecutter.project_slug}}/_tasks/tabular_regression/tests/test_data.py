"""The example's DataModule: the diabetes data's splits, your own .csv files, its settings."""

import numpy as np
import pytest
import torch

from {{ cookiecutter.package_name }}.data import DiabetesDataModule


@pytest.fixture(scope="module")
def datamodule() -> DiabetesDataModule:
    dm = DiabetesDataModule(batch_size=50)
    dm.setup("fit")
    return dm


def write_csv(path, columns: list[str], rows: np.ndarray) -> None:
    np.savetxt(path, rows, delimiter=",", header=",".join(columns), comments="")


def test_splits_have_the_right_sizes_and_are_disjoint(datamodule):
    splits = [set(split.tolist()) for split in datamodule.splits]
    assert [len(split) for split in splits] == [288, 66, 88]  # 442 patients: 65% / 15% / 20%
    assert set.union(*splits) == set(range(442)) and sum(map(len, splits)) == 442


def test_split_depends_only_on_its_seed():
    torch.manual_seed(123)  # the global seed must not matter
    first = DiabetesDataModule(seed=3)
    torch.manual_seed(456)
    second = DiabetesDataModule(seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first.splits, second.splits, strict=True))
    assert not torch.equal(first.splits[2], DiabetesDataModule(seed=4).splits[2])


def test_the_model_is_told_the_number_of_features_and_gets_raw_rows(datamodule):
    assert datamodule.num_features == 10 and datamodule.feature_names[:3] == ["age", "sex", "bmi"]
    features, targets = next(iter(datamodule.train_dataloader()))
    assert features.shape == (50, 10) and targets.shape == (50,)
    assert features[:, 0].max() > 50  # ages in years: the model, not the data, standardises


def test_standardization_is_measured_on_the_training_split_alone(datamodule):
    stats = datamodule.standardization()
    train_targets = datamodule.train_set.tensors[1]
    assert float(stats["target_mean"]) == pytest.approx(float(train_targets.mean()))
    assert float(stats["target_mean"]) != pytest.approx(float(datamodule.targets.mean()), abs=1e-3)
    standardized = (datamodule.train_set.tensors[0] - stats["feature_mean"]) / stats["feature_std"]
    assert torch.allclose(standardized.mean(dim=0), torch.zeros(10), atol=1e-4)


def test_a_csv_file_of_your_own_names_its_target_column(tmp_path):
    path = tmp_path / "houses.csv"
    rows = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
    write_csv(path, ["rooms", "price", "age", "area"], rows)
    dm = DiabetesDataModule(data_path=path, target_column="price", batch_size=10)
    assert dm.num_features == 3 and dm.feature_names == ["rooms", "age", "area"]
    assert torch.allclose(dm.targets, torch.as_tensor(rows[:, 1]))
    with pytest.raises(
        ValueError, match=r"houses\.csv has no column 'target' \(it has rooms, price, age, area\)"
    ):
        DiabetesDataModule(data_path=path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,target\n1,2\n3,x\n", r"bad\.csv is not a \.csv file with a header row"),
        ("a,target\n1,2\n3,nan\n", r"bad\.csv: 1 NaN or infinite target value\(s\), the first at index 1"),
        ("a,target\ninf,2\n3,4\n", r"bad\.csv: 1 NaN or infinite feature value\(s\), the first at index 0"),
        ("a,b,target\n1,2\n", r"bad\.csv: 2 values a row under 3 column names"),
    ],
)
def test_bad_csv_files_are_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        DiabetesDataModule(data_path=path)


def test_a_missing_data_file_is_named_in_the_error(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.csv does not exist"):
        DiabetesDataModule(data_path=tmp_path / "missing.csv")


def test_a_predict_file_needs_the_feature_columns_in_any_order(tmp_path, datamodule):
    path = tmp_path / "new.csv"
    names = list(reversed(datamodule.feature_names))
    write_csv(path, names[:-1], np.ones((3, 9)))
    with pytest.raises(ValueError, match=r"new\.csv lacks the feature column\(s\) age"):
        DiabetesDataModule(predict_path=path)
    rows = np.arange(30, dtype=np.float32).reshape(3, 10)
    write_csv(path, names, rows)
    dm = DiabetesDataModule(predict_path=path, batch_size=10)
    dm.setup("predict")
    (features,) = next(iter(dm.predict_dataloader()))
    assert torch.equal(features, torch.as_tensor(rows[:, ::-1].copy()))  # back in training order


@pytest.mark.parametrize(
    "settings",
    [{"val_fraction": 0.0}, {"test_fraction": 1.5}, {"val_fraction": 0.5, "test_fraction": 0.5}],
)
def test_bad_fractions_are_refused_naming_the_flag(settings):
    with pytest.raises(ValueError, match=rf"--data\.{next(iter(settings))}"):
        DiabetesDataModule(**settings)
