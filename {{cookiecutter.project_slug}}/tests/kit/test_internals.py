"""What `kit/internals.py` relies on in Lightning: these fail loudly when Lightning changes it."""

import subprocess
import sys

import lightning as L

from {{ cookiecutter.package_name }}.kit.internals import end_other_ranks


def test_the_ddp_launcher_still_ends_the_ranks_it_started():
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False)
    launcher = trainer.strategy.launcher
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    launcher.procs.append(rank)  # as launcher.launch does for each rank it starts
    end_other_ranks(trainer)
    assert rank.wait(timeout=10) == -9, "the launcher no longer kills the ranks it started"


def test_on_one_device_there_are_no_other_ranks_to_end():
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    end_other_ranks(trainer)  # no launcher: nothing to do, and no error
    assert trainer.strategy.launcher is None
