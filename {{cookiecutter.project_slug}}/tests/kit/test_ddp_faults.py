"""DDP never hangs: an error on one rank, Ctrl-C to the job, SIGTERM to one rank (2 CPU processes).

Each run must end within 60 s, with a non-zero exit code, and leave a last.ckpt that every rank
agreed on: the stop's own step when the ranks stopped together, the previous save otherwise.
"""

import os
import signal
import time

import pytest
import torch

from kit_testing import finish, free_port, run_fixtures, start_fixtures

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


@pytest.mark.slow
def test_a_nan_loss_on_one_rank_stops_every_rank_at_that_step_with_good_weights(tmp_path):
    """The ranks agree on the NaN verdict in the vote they share with stop requests
    (kit/fit_guard.py): both stop before the bad step changes the weights, and save."""
    nan_on_rank_1 = ("--trainer.callbacks+=faults.NaNBatchAt", "--trainer.callbacks.rank=1")
    started = time.monotonic()
    result = run_fixtures(tmp_path, *RUN, *nan_on_rank_1, "--trainer.callbacks.step=5", timeout=60)
    output = result.stdout + result.stderr
    assert time.monotonic() - started < 60
    assert result.returncode == 1, output[-3000:]
    assert "the training loss is nan at step 5" in output, output[-3000:]
    (last,) = tmp_path.rglob("last.ckpt")
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 5  # the state from just before the bad step
    assert all(t.isfinite().all() for t in checkpoint["state_dict"].values() if t.is_floating_point())


@pytest.mark.slow
def test_slurms_time_limit_warning_saves_on_every_rank_and_requeues(tmp_path):
    """Two SLURM tasks (faked: srun's variables, a recording `scontrol`) get SIGUSR1 at step 5."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    scontrol.chmod(0o755)
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    flags = (
        *RUN,
        "--trainer.callbacks+=faults.SignalAt",
        f"--trainer.callbacks.signum={int(signal.SIGUSR1)}",
    )
    tasks = [
        start_fixtures(
            tmp_path,
            *flags,
            "--trainer.callbacks.rank=-1",
            "--trainer.callbacks.step=5",
            env={**slurm, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
        )
        for rank in (0, 1)
    ]
    results = [finish(task, timeout=60) for task in tasks]
    for result in results:
        assert result.returncode == STOPPED, (result.stdout + result.stderr)[-3000:]
    assert "Requeued SLURM job 4242" in results[0].stderr
    assert (tmp_path / "scontrol.log").read_text().split("\n")[:-1] == ["requeue 4242"]
    (last,) = tmp_path.rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 6
    assert not list(tmp_path.rglob("hpc_ckpt*")), "Lightning's own in-handler save ran as well"


@pytest.fixture(scope="module")
def uninterrupted_ddp(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("straight")
    assert run_fixtures(folder, *RUN, timeout=120).returncode == 0
    return torch.load(next(folder.rglob("last.ckpt")), map_location="cpu", weights_only=False)


# signal to rank 1 alone at step 5: (exit code, the step last.ckpt then holds)
RANK_1_FAULTS = {
    "SIGTERM": (signal.SIGTERM, STOPPED, 6),  # the ranks stop together and save
    "SIGKILL": (signal.SIGKILL, "error", 4),  # no save: the periodic one of step 4 is all there is
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", RANK_1_FAULTS.values(), ids=RANK_1_FAULTS.keys())
def test_a_ddp_run_stopped_on_one_rank_resumes_to_the_same_weights(tmp_path, uninterrupted_ddp, fault):
    """A signal to rank 1 alone, then --ckpt_path=last: the weights of a run never stopped."""
    signum, expected_exit, saved_step = fault
    signal_rank_1 = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.rank=1")
    flags = (*signal_rank_1, "--trainer.callbacks.step=5", f"--trainer.callbacks.signum={int(signum)}")
    result = run_fixtures(tmp_path, *RUN, *flags, timeout=60)
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode != 0 if expected_exit == "error" else result.returncode == expected_exit, output
    (last,) = tmp_path.rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == saved_step
    resumed = run_fixtures(tmp_path, *RUN, "--ckpt_path=last", timeout=120)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    final = torch.load(last, map_location="cpu", weights_only=False)
    assert final["global_step"] == uninterrupted_ddp["global_step"] == 30
    for name, tensor in uninterrupted_ddp["state_dict"].items():
        assert torch.equal(tensor, final["state_dict"][name]), f"{name} differs"
