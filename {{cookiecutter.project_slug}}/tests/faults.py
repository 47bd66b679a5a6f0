"""Fault injection for the resume tests: a real signal, sent at an exact point of a real run.

Added to a run the way Lightning's docs add any callback:
`python main.py fit --trainer.callbacks+=faults.SignalAt --trainer.callbacks.step=10`
(with this folder on PYTHONPATH). A signal timed from outside the process races the training
loop; this one lands at the same step and phase every time.
"""

import os
import signal

import lightning as L
from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Sends `signum` to this process once, at `step`, in the phase named by `phase`.

    Phases: `train_batch_end`, right after the optimizer step that makes `global_step` equal
    `step` (the moment a periodic checkpoint of that step is written); `validation`, at the
    first validation batch once `global_step` has reached `step` (an epoch's closing
    validation when `step` ends an epoch).
    """

    def __init__(self, step: int, phase: str = "train_batch_end", signum: int = int(signal.SIGTERM)) -> None:
        if phase not in ("train_batch_end", "validation"):
            raise ValueError(f"phase must be train_batch_end or validation, got {phase!r}")
        self.step = step
        self.phase = phase
        self.signum = signum
        self._sent = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self.phase == "train_batch_end":
            self._send(trainer)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if self.phase == "validation" and not trainer.sanity_checking:
            self._send(trainer)

    def _send(self, trainer: L.Trainer) -> None:
        if not self._sent and trainer.global_step >= self.step:
            self._sent = True
            os.kill(os.getpid(), self.signum)
