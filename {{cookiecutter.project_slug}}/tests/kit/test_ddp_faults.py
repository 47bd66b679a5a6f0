"""DDP never hangs: an error on one rank, Ctrl-C to the job, SIGTERM to one rank (2 CPU processes).

Each run must end within 60 s, with a non-zero exit code, and leave a last.ckpt that every rank
agreed on: the stop's own step when the ranks stopped together, the previous save otherwise.
"""

import signal
import time

import pytest
import torch

from kit_testing import run_fixtures

DDP = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
# 240 samples, 120 per rank, 16 a batch: 7 steps an epoch; last.ckpt also every 2 steps.
RUN = (
    "fit",
    *DDP,
    "--trainer.max_steps=30",
    "--trainer.max_epochs=-1",
    "--last_checkpoint.every_n_train_steps=2",
)
STOPPED = 143  # kit.cli.EXIT_STOPPED

# fault: (flags, exit code, the step last.ckpt holds afterwards)
FAULTS = {
    # The error leaves the other rank in a collective: no new save (it would wait for ever).
    "OOM-on-rank-1": (("--trainer.callbacks+=faults.RaiseAt", "--trainer.callbacks.rank=1"), "error", 4),
    "OOM-on-rank-0": (("--trainer.callbacks+=faults.RaiseAt", "--trainer.callbacks.rank=0"), "error", 4),
    # Signals: the ranks agree at the end of the next step, and all stop and save there.
    "Ctrl-C-to-the-job": (
        (
            "--trainer.callbacks+=faults.SignalAt",
            f"--trainer.callbacks.signum={int(signal.SIGINT)}",
            "--trainer.callbacks.group=true",
        ),
        STOPPED,
        6,
    ),
    "SIGTERM-to-rank-1-only": (
        ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.rank=1"),
        STOPPED,
        6,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_fault_on_any_rank_ends_every_rank_with_a_consistent_checkpoint(tmp_path, fault):
    flags, expected_exit, saved_step = fault
    started = time.monotonic()
    result = run_fixtures(tmp_path, *RUN, *flags, "--trainer.callbacks.step=5", timeout=60)
    output = result.stdout + result.stderr
    assert time.monotonic() - started < 60
    if expected_exit == "error":
        assert result.returncode not in (0, STOPPED), output[-3000:]
        assert "simulated on rank" in output
    else:
        assert result.returncode == expected_exit, output[-3000:]
        assert "every rank stops after this step" in output
    (last,) = tmp_path.rglob("last.ckpt")
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == saved_step
    assert not list(tmp_path.rglob("*.partial")), "a half-written checkpoint was left behind"
