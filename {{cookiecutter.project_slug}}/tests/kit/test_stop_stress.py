"""Stopping under load: Ctrl-C, SIGTERM or a sweep's prune, at any moment of a run, with a busy
process beside it, always ends the run with exit code 143 and never kills it by the signal.

The signal is sent by the run itself at a chosen hook (`SignalIn`, below): during training,
at the last step of the last epoch, in the final validation, after training (`on_train_end`),
between Lightning's teardown and ours (`on_fit_end`) and during teardown. The short version
(a few moments) runs by default; the slow one repeats every moment, single-process and DDP.
"""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback

from kit_testing import KIT_TESTS, PROJECT_ROOT, QUICK, finish, start_fixtures

STOPPED = 143  # kit.cli.EXIT_STOPPED
DDP = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
# 240 samples, 16 a batch: 15 steps an epoch (7 per rank under DDP); 2 epochs.
RUN = ("fit", "--trainer.max_epochs=2", "--trainer.limit_val_batches=2")
LAST_STEP = {"single": 30, "ddp": 14}
MOMENTS = ("step", "last_step", "validation", "train_end", "fit_end", "teardown")
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


class SignalIn(Callback):
    """Sends `signum` once from DDP rank 0 to itself (with `group`: to every rank) in
    the hook `moment`: `step` (after the optimizer step that makes global_step equal `step`),
    `last_step` (the run's last one), `validation` (the last epoch's), `train_end`, `fit_end`
    (after Lightning has put back the handlers it found) or `teardown`."""

    def __init__(self, moment: str, signum: int, last_step: int, step: int = 3, group: bool = False) -> None:
        self.moment, self.signum, self.group = moment, signum, group
        self.step = last_step if moment == "last_step" else step
        self.last_step = last_step
        self._sent = False

    def _send(self, trainer: L.Trainer) -> None:
        if self._sent or trainer.global_rank != 0:
            return
        self._sent = True
        if self.group:  # as a terminal's Ctrl-C does: every rank
            os.killpg(os.getpgid(0), self.signum)
        else:
            os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.moment in ("step", "last_step") and trainer.global_step == self.step:
            self._send(trainer)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.moment == "validation" and trainer.global_step == self.last_step:
            self._send(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.moment == "train_end":
            self._send(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.moment == "fit_end":
            self._send(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.moment == "teardown" and stage == "fit":
            self._send(trainer)


@pytest.fixture(scope="module")
def busy_machine() -> Iterator[None]:
    """A process that keeps one core busy, as another job on a shared machine does."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    busy.kill()
    busy.wait()


def stop_run(workdir: Path, kind: str, moment: str, signum: int, group: bool = False) -> None:
    workdir.mkdir(exist_ok=True)
    flags = (
        "--trainer.callbacks+=test_stop_stress.SignalIn",
        f"--trainer.callbacks.moment={moment}",
        f"--trainer.callbacks.signum={int(signum)}",
        f"--trainer.callbacks.last_step={LAST_STEP[kind]}",
        f"--trainer.callbacks.group={str(group).lower()}",
    )
    result = finish(start_fixtures(workdir, *RUN, *(DDP if kind == "ddp" else ()), *flags), timeout=240)
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == STOPPED, f"{kind}, {signal.Signals(signum).name} at {moment}:\n{output}"
    assert "Stopped before the end (exit code 143)" in output
    assert list(workdir.rglob("last.ckpt")), "nothing to resume from"


SHORT = [("single", "SIGINT", "last_step"), ("single", "SIGTERM", "fit_end"), ("ddp", "SIGTERM", "teardown")]


@pytest.mark.parametrize(("kind", "name", "moment"), SHORT, ids=["-".join(case) for case in SHORT])
def test_a_stop_at_a_late_moment_on_a_busy_machine_exits_143(tmp_path, busy_machine, kind, name, moment):
    stop_run(tmp_path, kind, moment, SIGNALS[name])


@pytest.mark.slow
@pytest.mark.stress  # about 25 minutes on 2 cores: `nox -s kit -- -m stress` runs it; CI runs the short one
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("name", SIGNALS)
@pytest.mark.parametrize("kind", ["single", "ddp"])
def test_a_stop_at_any_moment_on_a_busy_machine_exits_143(tmp_path, busy_machine, kind, name, moment):
    for repeat in range(2):
        stop_run(tmp_path / str(repeat), kind, moment, SIGNALS[name], group=kind == "ddp" and repeat == 1)


def test_a_pruned_trial_is_signalled_once_and_the_sweep_never(tmp_path, busy_machine):
    """A prune stops the trial (exit code 143) through the trial's own process group; this
    process, standing in for the sweep, receives nothing, and the trial one SIGTERM."""
    optuna = pytest.importorskip("optuna", reason='needs the sweep extra: pip install -e ".[sweep]"')
    from {{ cookiecutter.package_name }}.kit import sweep

    metrics = tmp_path / "metrics.jsonl"
    command = [
        *(sys.executable, "-m", "kit_fixtures", *RUN[:1], "--trainer.max_epochs=30"),
        *("--trainer.limit_val_batches=2", f"--trainer.default_root_dir={tmp_path}", *QUICK),
        f"--trainer.callbacks+={sweep.MetricsFile.__module__}.MetricsFile",
        f"--trainer.callbacks.path={metrics}",
        "--trainer.callbacks.metric=val/acc",
    ]
    python_path = os.pathsep.join([str(PROJECT_ROOT / "src"), str(KIT_TESTS)])
    env = {**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0))
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        state, _ = sweep.run_trial(study, study.ask(), command, metrics, tmp_path / "output.log", env)
    finally:
        signal.signal(signal.SIGTERM, previous)
    log = (tmp_path / "output.log").read_text()
    assert state == "pruned" and received == [], log[-3000:]
    assert "Stopped before the end (exit code 143)" in log, log[-3000:]
    assert log.count("Received SIGTERM") == 1, log[-3000:]
