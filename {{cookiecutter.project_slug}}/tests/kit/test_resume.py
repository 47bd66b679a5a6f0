"""Nothing lost, on the kit's fixtures: interrupted runs resume exactly from any phase, bad runs
stop clearly."""

import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.package_name }}.kit.cli import EXIT_STOPPED

from kit_testing import start_fixtures, tensorboard_scalars

MAX_STEPS = 90  # 15 batches per epoch: epochs end at steps 15, 30, 45, 60, 75, 90
EVERY = 5  # last.ckpt every 5 steps, besides the end of every epoch
FIT = (
    "fit",
    f"--trainer.max_steps={MAX_STEPS}",
    "--trainer.max_epochs=-1",
    f"--last_checkpoint.every_n_train_steps={EVERY}",
)


def run_fit(
    save_dir: Path, *flags: str, interrupt: signal.Signals | None = None
) -> subprocess.CompletedProcess:
    """Run the fixtures' `fit`; with `interrupt`, send that signal from outside once a last.ckpt
    exists. Its output: stdout and stderr together."""
    process = start_fixtures(save_dir, *FIT, *flags)
    if interrupt is not None:
        deadline = time.monotonic() + 120
        while (
            not list(save_dir.rglob("last.ckpt")) and process.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        process.send_signal(interrupt)
    output, errors = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, output + errors)


def last_checkpoint_path(save_dir: Path) -> Path:
    (path,) = save_dir.rglob("last.ckpt")
    return path


def last_checkpoint(save_dir: Path) -> dict:
    return torch.load(last_checkpoint_path(save_dir), map_location="cpu", weights_only=True)


def assert_same_weights(first: dict, second: dict) -> None:
    assert first["state_dict"].keys() == second["state_dict"].keys()
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), f"{name} differs"


def assert_resumes_exactly(save_dir: Path, uninterrupted: dict) -> None:
    """Resume with --ckpt_path=last: same steps, same weights, same optimizer state, one run folder."""
    resumed = run_fit(save_dir, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stdout
    final = last_checkpoint(save_dir)
    assert final["global_step"] == MAX_STEPS
    # One run folder: the resumed run logged into the interrupted run's version_0.
    assert len(list(save_dir.glob("*/version_*"))) == 1
    # On the CPU with a fixed seed, resuming changes nothing: same weights, same optimizer state.
    assert_same_weights(final, uninterrupted["checkpoint"])
    adam_steps = [state["step"] for state in final["optimizer_states"][0]["state"].values()]
    assert all(step == MAX_STEPS for step in adam_steps)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    save_dir = tmp_path_factory.mktemp("uninterrupted")
    result = run_fit(save_dir)
    assert result.returncode == 0, result.stdout
    (run_dir,) = save_dir.glob("*/version_0")
    return {"checkpoint": last_checkpoint(save_dir), "scalars": tensorboard_scalars(run_dir)}


# (signal, step, phase, the step last.ckpt then holds): each lands at the same point every run.
FAULTS = {
    "SIGTERM-mid-step": (signal.SIGTERM, 12, "train_batch_end", 12),
    "SIGINT-mid-step": (signal.SIGINT, 13, "train_batch_end", 13),
    # Right after the periodic save of step 10: Lightning keeps that file (ready = completed + 1).
    "SIGTERM-after-periodic-save": (signal.SIGTERM, 10, "train_batch_end", 10),
    # During epoch 0's closing validation: it finishes, then the end-of-epoch save.
    "SIGTERM-in-epoch-end-validation": (signal.SIGTERM, 15, "validation", 15),
    # No chance to save: the newest file on disk is all there is.
    "SIGKILL-after-periodic-save": (signal.SIGKILL, 12, "train_batch_end", 10),
    "SIGKILL-after-epoch-end-save": (signal.SIGKILL, 17, "train_batch_end", 15),
    "SIGKILL-in-epoch-end-validation": (signal.SIGKILL, 30, "validation", 25),
    # Killed with half of step 20's last.ckpt written: the whole one of step 15 stays in place.
    "SIGKILL-mid-checkpoint-write": (signal.SIGKILL, 20, "checkpoint_write", 15),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_run_stopped_at_any_phase_resumes_to_the_same_weights(tmp_path, uninterrupted, fault):
    signum, step, phase, saved_step = fault
    fault_flags = [
        "--trainer.callbacks+=faults.SignalAt",
        f"--trainer.callbacks.step={step}",
        f"--trainer.callbacks.phase={phase}",
        f"--trainer.callbacks.signum={int(signum)}",
    ]
    stopped = run_fit(tmp_path, *fault_flags)
    if signum == signal.SIGKILL:
        assert stopped.returncode == -signal.SIGKILL, stopped.stdout
    else:
        assert stopped.returncode == EXIT_STOPPED and "Received SIGTERM" in stopped.stdout, stopped.stdout
        assert "resume with `fit --ckpt_path=last`" in stopped.stdout
    interrupted = last_checkpoint(tmp_path)
    assert interrupted["global_step"] == saved_step
    if phase == "checkpoint_write":  # the kill landed mid-write: a torn file beside the whole one
        (torn,) = tmp_path.rglob(".last.ckpt.*.partial")
        assert 0 < torn.stat().st_size < last_checkpoint_path(tmp_path).stat().st_size * 2
    if phase == "validation" and signum != signal.SIGKILL:
        # The validation under way finished before the save: the epoch is complete, and its
        # metrics reached TensorBoard.
        assert "finishing this validation first" in stopped.stdout
        assert interrupted["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] == 1
        (run_dir,) = tmp_path.glob("*/version_0")
        assert tensorboard_scalars(run_dir)["val/acc"] == uninterrupted["scalars"]["val/acc"][:1]

    assert_resumes_exactly(tmp_path, uninterrupted)
    if signum != signal.SIGKILL:  # a killed process loses its unflushed TensorBoard events
        # Every epoch's validation ran once, with the same results: none lost, none repeated.
        (run_dir,) = tmp_path.glob("*/version_0")
        assert tensorboard_scalars(run_dir)["val/acc"] == uninterrupted["scalars"]["val/acc"]


@pytest.mark.slow
@pytest.mark.parametrize("interrupt", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_from_outside_at_any_moment_resumes_to_the_same_weights(tmp_path, uninterrupted, interrupt):
    stopped = run_fit(tmp_path, interrupt=interrupt)
    assert stopped.returncode == EXIT_STOPPED and "Received SIGTERM" in stopped.stdout, stopped.stdout
    assert "`Trainer.fit` stopped" not in stopped.stdout, "the run finished before the signal landed"
    assert 0 < last_checkpoint(tmp_path)["global_step"] < MAX_STEPS
    assert_resumes_exactly(tmp_path, uninterrupted)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])  # 2: the NaN comes in both batches of step 17
def test_non_finite_loss_stops_naming_the_step_and_keeps_good_weights(tmp_path, accumulate):
    nan_at_17 = ("--trainer.callbacks+=faults.NaNBatchAt", "--trainer.callbacks.step=17")
    result = run_fit(tmp_path, *nan_at_17, f"--trainer.accumulate_grad_batches={accumulate}")
    assert result.returncode == 1, result.stdout
    message = [line for line in result.stdout.splitlines() if line.startswith("error:")][-1]
    assert "the training loss is nan at step 17" in message and "gradient_clip_val" in message, message
    checkpoint = last_checkpoint(tmp_path)
    assert checkpoint["global_step"] == 17  # the state from just before the bad step
    assert all(t.isfinite().all() for t in checkpoint["state_dict"].values() if t.is_floating_point())
