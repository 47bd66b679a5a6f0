"""The user's room is theirs: swap the example's network and data, and the machinery still holds.

A rendered project gets a different network (an MLP, chosen in YAML) and a different DataModule
(a ten-line subclass of the kit's base, serving an ordinary map-style Dataset that reads one
sample per file from disk, with loader workers), the way a user would bring their own. Then it
trains, runs DDP on CPU, tunes its batch size and resumes exactly after a SIGTERM, through
`main.py` as a user runs it. (That the kit's own tests pass with the user's room gone
altogether is the generated project's `kit` nox session.)
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pip_install, render

PACKAGE = "swap_test"

MY_PARTS = '''"""A user's own network and data, as they would write them."""

import math
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from .data import load_digits, stratified_split
from .kit.datamodule import KitDataModule


class TinyMLP(nn.Module):
    def __init__(self, image_shape: tuple[int, int, int], num_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(image_shape), hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layers(images)


class NpyFiles(Dataset):
    """One sample per file, `<index>_<label>.npy`, read in `__getitem__(int)`."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(folder.glob("*.npy"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = self.files[index]
        return torch.from_numpy(np.load(path)), int(path.stem.split("_")[1])


def write_digit_files(folder: Path) -> None:
    images, labels = load_digits()
    splits = stratified_split(torch.as_tensor(labels), 0.1, 0.2, seed=0)
    for name, indices in zip(("train", "val", "test"), splits):
        (folder / name).mkdir(parents=True)
        for index in indices.tolist():
            np.save(folder / name / f"{index:05d}_{labels[index]}.npy", images[index])


# The ten-line DataModule: a subclass of the kit's base that provides datasets, nothing else.
class FilesDataModule(KitDataModule):
    model_links, image_shape, num_classes = ("image_shape", "num_classes"), (1, 8, 8), 10

    def __init__(self, folder: Path = Path("samples"), batch_size: int | Literal["auto"] = 64, num_workers=0):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        self.folder = folder

    def prepare_data(self) -> None:  # once per node: write the files
        if not self.folder.exists():
            write_digit_files(self.folder)

    def setup(self, stage: str) -> None:  # on every rank: read them
        folders = (self.folder / "train", self.folder / "val", self.folder / "test")
        self.train_set, self.val_set, self.test_set = map(NpyFiles, folders)
'''

SWAP_CONFIG = f"""model:
  network:
    class_path: {PACKAGE}.my_parts.TinyMLP
    init_args:
      hidden: 64
data:
  num_workers: 2
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = render(tmp_path_factory.mktemp("swap"), project_name="Swap Test")
    package = project / "src" / PACKAGE
    (package / "my_parts.py").write_text(MY_PARTS)
    cli = package / "cli.py"
    cli.write_text(
        cli.read_text().replace(
            "from .data import DigitsDataModule\n",
            "from .my_parts import FilesDataModule as DigitsDataModule\n",
        )
    )
    (project / "swap.yaml").write_text(SWAP_CONFIG)
    # The example's data settings (val_fraction, seed, ...) are not FilesDataModule's: a user who
    # brings their own DataModule edits default.yaml's `data:` to the settings it takes.
    default = project / "configs" / "default.yaml"
    config = yaml.safe_load(default.read_text())
    config["data"] = {key: config["data"][key] for key in ("batch_size", "num_workers")}
    default.write_text(yaml.safe_dump(config))
    pip_install(project, "3.11")
    return project


def fit(project: Path, workdir: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    paths = [str(project / "src"), str(project / "tests" / "kit")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [
        sys.executable,
        str(project / "main.py"),
        "fit",
        "-c",
        str(project / "swap.yaml"),
        f"--data.folder={workdir / 'samples'}",
        f"--trainer.default_root_dir={workdir / 'logs'}",
        "--trainer.enable_progress_bar=false",
        *flags,
    ]
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def last_checkpoint(workdir: Path) -> dict:
    (path,) = (workdir / "logs").rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_swapped_network_and_on_disk_dataset_train(project, tmp_path):
    fit(project, tmp_path, "--trainer.max_epochs=5", "--lr_scheduler.T_max=5")
    checkpoint = last_checkpoint(tmp_path)
    assert checkpoint["hyper_parameters"]["network"]["class_path"] == f"{PACKAGE}.my_parts.TinyMLP"
    assert len(list((tmp_path / "samples" / "train").glob("*.npy"))) == 1259
    assert checkpoint["callbacks"], "the kit's callbacks ran"
    best = [key for key in checkpoint["callbacks"] if key.startswith("BestCheckpoint")]
    assert checkpoint["callbacks"][best[0]]["best_model_score"] > 0.8, "the MLP learned the digits"


@pytest.mark.slow
def test_swapped_project_runs_ddp_on_cpu(project, tmp_path):
    fit(project, tmp_path, "-c", str(project / "configs/presets/ddp_cpu.yaml"), "--trainer.max_epochs=1")
    assert last_checkpoint(tmp_path)["global_step"] == 10  # 1,259 samples, 630 per rank, 64 a batch


@pytest.mark.slow
def test_swapped_project_tunes_its_batch_size(project, tmp_path):
    result = fit(project, tmp_path, "--data.batch_size=auto", "--trainer.max_epochs=1")
    assert "batch_size=auto" in result.stdout + result.stderr
    (config,) = (tmp_path / "logs").rglob("config.yaml")
    assert isinstance(yaml.safe_load(config.read_text())["data"]["init_args"]["batch_size"], int)


@pytest.mark.slow
def test_swapped_project_resumes_exactly_with_loader_workers(project, tmp_path):
    steps = ("--trainer.max_steps=30", "--trainer.max_epochs=-1")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir()
    stopped.mkdir()
    fit(project, straight, *steps)
    signal_at = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=12")
    interrupted = fit(project, stopped, *steps, *signal_at, check=False)
    assert interrupted.returncode == 143, interrupted.stderr[-3000:]  # 128 + SIGTERM: stopped, not finished
    assert "Received SIGTERM" in interrupted.stdout + interrupted.stderr
    assert last_checkpoint(stopped)["global_step"] == 12
    fit(project, stopped, *steps, "--ckpt_path=last")
    first, second = last_checkpoint(straight), last_checkpoint(stopped)
    assert second["global_step"] == 30
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), f"{name} differs after the resume"
