"""Fault injection for the resume tests: a real signal, sent at an exact point of a real run.

Added to a run the way Lightning's docs add any callback:
`python main.py fit --trainer.callbacks+=faults.SignalAt --trainer.callbacks.step=10`
(with this folder on PYTHONPATH). A signal timed from outside the process races the training
loop; this one lands at the same step and phase every time.
"""

import io
import os
import signal
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Sends `signum` to this process once, at `step`, in the phase named by `phase`.

    Only the process of DDP rank `rank` (-1: every rank) sends it, to itself or, with `group`,
    to its whole process group (every rank). Phases: `train_batch_end`, right after the
    optimizer step that makes `global_step` equal `step` (the moment a periodic checkpoint of
    that step is written); `validation`, at the first validation batch once `global_step` has
    reached `step` (an epoch's closing validation when `step` ends an epoch);
    `checkpoint_write`, halfway through writing the first checkpoint file once `global_step`
    has reached `step` (half its bytes are on disk).
    """

    def __init__(
        self,
        step: int,
        phase: str = "train_batch_end",
        signum: int = int(signal.SIGTERM),
        rank: int = 0,
        group: bool = False,
    ) -> None:
        if phase not in ("train_batch_end", "validation", "checkpoint_write"):
            raise ValueError(f"phase must be train_batch_end, validation or checkpoint_write, got {phase!r}")
        self.step = step
        self.phase = phase
        self.signum = signum
        self.rank = rank
        self.group = group
        self._sent = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.phase != "checkpoint_write":
            return
        # The writer of the bytes (inside the kit's AtomicCheckpointIO, when there is one): a kill
        # mid-write tears the file being written, as a real one would.
        checkpoint_io = trainer.strategy.checkpoint_io
        checkpoint_io = getattr(checkpoint_io, "writer", checkpoint_io)
        write = checkpoint_io.save_checkpoint

        def write_half_then_signal(checkpoint: dict, path: str, *args: object, **kwargs: object) -> None:
            if trainer.global_step >= self.step:
                buffer = io.BytesIO()
                torch.save(checkpoint, buffer)
                Path(path).write_bytes(buffer.getvalue()[: buffer.tell() // 2])
                self._send(trainer)
            write(checkpoint, path, *args, **kwargs)

        checkpoint_io.save_checkpoint = write_half_then_signal  # type: ignore[method-assign]

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self.phase == "train_batch_end":
            self._send(trainer)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if self.phase == "validation" and not trainer.sanity_checking:
            self._send(trainer)

    def _send(self, trainer: L.Trainer) -> None:
        if not self._sent and trainer.global_step >= self.step and self.rank in (-1, trainer.global_rank):
            self._sent = True
            if self.group:  # as a terminal's Ctrl-C does: every process of the job
                os.killpg(os.getpgid(0), self.signum)
            else:
                os.kill(os.getpid(), self.signum)


class NaNBatchAt(Callback):
    """Puts a NaN into the first input of the batch trained at `step` (on DDP rank `rank` only,
    if given): the loss turns NaN there.

    Data with a NaN is refused when it is loaded; this is the way a NaN still reaches a run
    (an augmentation, a division by zero in the model), at a step known in advance.
    """

    def __init__(self, step: int, rank: int = -1) -> None:
        self.step = step
        self.rank = rank  # -1: every DDP rank

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, *args: object
    ) -> None:
        if trainer.global_step == self.step and self.rank in (-1, trainer.global_rank):
            inputs = batch[0]  # type: ignore[index]
            inputs.view(-1)[0] = float("nan")


class RaiseAt(Callback):
    """Raises `torch.OutOfMemoryError` on DDP rank `rank` alone at `step`, as a real OOM on the
    fullest GPU would: the other ranks are left waiting in the step's collectives."""

    def __init__(self, step: int, rank: int = 1) -> None:
        self.step = step
        self.rank = rank

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            raise torch.OutOfMemoryError(f"simulated on rank {self.rank} at step {self.step}")
