"""Edges of resuming, on the kit's fixtures: damaged files, contradicting settings, one run
folder, a reusable config.

Each bad request ends with one line and exit code 2, before anything is written.
"""

import errno
import fcntl
import io
import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from lightning.fabric.plugins import TorchCheckpointIO

from {{ cookiecutter.package_name }}.kit.checkpoint_io import AtomicCheckpointIO
from {{ cookiecutter.package_name }}.kit.fit_guard import FitGuard

from kit_fixtures import FixtureCLI, run
from kit_testing import QUICK

SHORT = ("--trainer.limit_val_batches=2", "--trainer.max_epochs=-1")


@pytest.fixture
def run_kit(tmp_path, monkeypatch):
    """`python -m kit_fixtures ARGS` in this process, logging under a temp folder."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run(FixtureCLI, [*args, *QUICK])


def fit(run_kit, *args: str) -> None:
    run_kit("fit", *SHORT, *args)


def refused(run_kit, capsys, *args: str) -> str:
    """Run ARGS, which must end with exit code 2; its one-line message."""
    with pytest.raises(SystemExit) as stop:
        run_kit(*args)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: "), lines[-3:]
    return lines[-1]


@pytest.fixture
def trained(run_kit, tmp_path) -> Path:
    """A run stopped at step 3, in its first epoch: lightning_logs/version_0."""
    fit(run_kit, "--trainer.max_steps=3")
    return tmp_path / "lightning_logs" / "version_0"


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_checkpoint_is_named_in_one_line(run_kit, capsys, trained, damage):
    last = trained / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    for ckpt_path in ("last", str(last)):
        message = refused(run_kit, capsys, "fit", *SHORT, f"--ckpt_path={ckpt_path}")
        assert "version_0/checkpoints/last.ckpt is damaged" in message and "--ckpt_path=best" in message
    message = refused(run_kit, capsys, "test", str(f"--ckpt_path={last}"))
    assert "damaged" in message


def test_settings_that_contradict_the_checkpoint_are_refused_and_nothing_is_rewritten(
    run_kit, capsys, trained
):
    config = (trained / "config.yaml").read_bytes()
    message = refused(run_kit, capsys, "fit", *SHORT, "--ckpt_path=last", "--model.hidden=32")
    assert "model.hidden: 16 in the checkpoint, 32 now" in message
    message = refused(run_kit, capsys, "fit", *SHORT, "--ckpt_path=last", "--data.batch_size=32")
    assert "data.batch_size: 16 in the checkpoint, 32 now" in message
    message = refused(run_kit, capsys, "fit", *SHORT, "--ckpt_path=last", "--data.seed=1")
    assert "data.seed: 0 in the checkpoint, 1 now" in message  # another split
    assert (trained / "config.yaml").read_bytes() == config
    assert [p.name for p in trained.parent.iterdir()] == ["version_0"]
    # Longer training: the same run goes on.
    fit(run_kit, "--ckpt_path=last", "--trainer.max_steps=4")
    assert torch.load(trained / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4


def test_a_path_resumes_like_last_and_the_saved_config_reruns_from_scratch(run_kit, trained):
    fit(run_kit, f"--ckpt_path={trained / 'checkpoints' / 'last.ckpt'}", "--trainer.max_steps=6")
    assert [p.name for p in trained.parent.iterdir()] == ["version_0"], "resumed into its own folder"
    assert torch.load(trained / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    saved = yaml.safe_load((trained / "config.yaml").read_text())
    assert saved["ckpt_path"] is None
    logger = saved["trainer"]["logger"]  # as asked: Lightning's default, no version
    assert logger is None or logger["init_args"].get("version") is None

    # "Rerun this run": a new folder, trained from step 0 (not the finished checkpoint).
    fit(run_kit, "-c", str(trained / "config.yaml"))
    rerun = trained.parent / "version_1" / "checkpoints" / "last.ckpt"
    assert torch.load(rerun, weights_only=False)["global_step"] == 6


def test_a_run_folder_in_use_is_not_resumed_twice(run_kit, capsys, trained):
    with (trained / ".fit.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `fit` holds it
        message = refused(run_kit, capsys, "fit", *SHORT, "--ckpt_path=last", "--trainer.max_steps=6")
        assert str(trained) in message and "in use" in message
    fit(run_kit, "--ckpt_path=last", "--trainer.max_steps=6")  # free again once that run ends


def test_evaluation_needs_a_number_for_the_batch_size(run_kit, capsys, trained):
    message = refused(run_kit, capsys, "test", "--ckpt_path=last", "--data.batch_size=auto")
    assert "resolved by `fit` only" in message and "config.yaml" in message


class DiskFullWriter(TorchCheckpointIO):
    """Writes half a checkpoint, then fails as a full disk does."""

    def save_checkpoint(self, checkpoint: dict, path: Path, storage_options: object = None) -> None:
        Path(path).write_bytes(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_leaves_the_previous_checkpoint_whole_and_no_partial_file(tmp_path):
    best = tmp_path / "best-epoch001.ckpt"
    best.write_bytes(b"the good one")
    with pytest.raises(OSError, match="No space left"):
        AtomicCheckpointIO(DiskFullWriter()).save_checkpoint({"state": 1}, best)
    assert best.read_bytes() == b"the good one"
    assert [p.name for p in tmp_path.iterdir()] == [best.name]


def test_a_checkpoint_is_renamed_into_place_whole_and_loads_back(tmp_path):
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"the previous one")
    writer = AtomicCheckpointIO()
    writer.save_checkpoint({"global_step": 7}, last)
    assert writer.load_checkpoint(last) == {"global_step": 7}
    assert [p.name for p in tmp_path.iterdir()] == [last.name]


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_logs_folder_that_cannot_be_written_gets_one_line(run_kit, capsys, monkeypatch, trained, code):
    real_makedirs = os.makedirs

    def unwritable(path, *args, **kwargs):  # as a read-only mount or a full disk answers
        if "lightning_logs" in str(path):
            raise OSError(code, os.strerror(code), str(path))
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", unwritable)
    message = refused(run_kit, capsys, "validate", "--ckpt_path=last")
    assert os.strerror(code) in message and "--trainer.default_root_dir=DIR" in message


@pytest.mark.parametrize("saved_by", ["this kit", "an older kit"])
def test_the_random_state_comes_back_from_a_checkpoint_read_safely(saved_by):
    """Python's generator travels as one tensor (quick to pickle, and torch.load(weights_only=True)
    reads it); a checkpoint that holds it as the tuple of an older kit still resumes."""
    resume = FitGuard()
    random.seed(5)
    state = resume.state_dict()
    if saved_by == "an older kit":
        state["python"] = random.getstate()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    expected = [random.random() for _ in range(3)]
    random.seed(99)
    resume.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    trainer: Any = SimpleNamespace(world_size=1)
    resume.on_train_start(trainer, torch.nn.Linear(1, 1))  # where the saved state is put back
    assert [random.random() for _ in range(3)] == expected
