"""The guarantees of every `fit`, in one object that owns their state: `FitGuard`.

- **Clean stops.** Ctrl-C, SIGTERM and SLURM's warning before the time limit stop training at a
  step's end; `last.ckpt` is saved on the way out (`LastCheckpoint.on_exception`) and the process
  exits 143 (`kit.cli.run`; a SLURM job is requeued first). One signal, from arrival to exit code:
  `FitGuard._on_signal` notes it, `FitGuard.on_train_batch_end` (or Lightning's own handler, on one
  device) stops the loop with `StopRequested`, and `kit.cli.run_to_the_end` turns that into 143.
  SLURM's warning during start-up, before this exists, is noted by `kit/early_signal.py` and
  taken over in `setup`.
- **A clear stop on a NaN loss**, before it reaches the weights.
- **Exact resume**: the random generators and the shuffling epoch travel in the checkpoint.
- **The DDP agreement**: the ranks decide together, in one collective a step, whether any rank
  was asked to stop or saw a non-finite loss, so none is left waiting; an error on one rank
  alone ends the others.
- **`train/loss`** logged on the steps Lightning writes.

The CLI installs it on every `fit`, the way it installs the checkpoints (not through
`trainer.callbacks`, so no edit of that list drops a guarantee); its one setting is
`--guard.train_loss` (null: the module logs its own).
"""

import math
import os
import random
import signal
import threading
from collections.abc import Mapping
from typing import Any, Literal, cast

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from . import early_signal, internals
from .errors import EXIT_STOPPED


class StopRequested(SIGTERMException):
    """A signal reached some rank; every rank stops at the end of the same step (exit code 143).

    `requeue`: it was SLURM's warning before the time limit, and the job should be requeued.
    """

    def __init__(self, requeue: bool = False) -> None:
        super().__init__(EXIT_STOPPED)  # also when nothing catches it: the process exits 143
        self.requeue = requeue


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and what to try."""


def is_collective_stop(error: BaseException) -> bool:
    """Whether every DDP rank raised this at the same step: a stop they agreed on."""
    return isinstance(error, SIGTERMException | NonFiniteLossError)


def slurm_requeue_signal(trainer: L.Trainer) -> int | None:
    """The signal SLURM sends before the time limit (`--signal`), when this run should requeue."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if environment is None and SLURMEnvironment.detect():  # one device: no cluster environment
        environment = SLURMEnvironment()
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        return int(environment.requeue_signal or signal.SIGUSR1)
    return None


Phase = Literal["idle", "before", "training", "after", "stopping", "done"]


class FitGuard(Callback):
    """Clean stops, the NaN stop, exact resume, the DDP agreement and `train/loss`, for one `fit`.

    **Stops.** A bare KeyboardInterrupt can land anywhere, even halfway through an optimizer step,
    and leave a torn state behind, so a signal only notes the request and training stops at a
    step's end; a second Ctrl-C aborts at once. The handlers are ours from `setup` until the
    process ends, so no signal ever meets the default action in between: before training starts
    the request waits for it; after training ends the run stops at once with exit code 143, its
    state already saved. Nothing is ever re-sent as a signal (one sent to oneself can arrive
    after the handler meant for it is gone). On one device the request goes to Lightning's own
    handler, which stops after the current batch; one that arrives during validation lets it
    finish first (the epoch's metrics and best checkpoint are kept, and the resumed run starts
    the next epoch); a second stops validation too. Under DDP the handler only notes the signal
    (Lightning's runs a collective inside the handler, on the signalled rank alone, which can
    leave the ranks waiting in different collectives for ever): the ranks vote at each step and
    all stop at its end, so last.ckpt is consistent (not after an epoch's last step, whose state
    would resume in the wrong epoch: the next step decides).

    **NaN.** The loss is checked after the backward pass, before the optimizer step, so the
    weights, the optimizer's state and the `last.ckpt` saved on the way out are those of the
    last good step. On a GPU the verdict is copied to the CPU as soon as the forward pass has
    computed it and read only before the step, so the check does not leave the GPU idle. The
    forward pass of a bad batch has already moved the buffers (BatchNorm's running statistics),
    so they are copied where each optimizer step's batches start and put back.

    **Exact resume.** The train loader's position travels in the checkpoint (`StatefulDataLoader`);
    this adds the random generators (so dropout masks repeat) and the shuffling epoch. The saved
    random state is put back when training starts, not when the checkpoint is read, so that the
    sanity check and a loader drawing its seed cannot use it up. Lightning 2.6 sets a resumed
    run's sampler one epoch ahead when it resumes from an end-of-epoch checkpoint, so the epoch is
    set again from `trainer.current_epoch` when each epoch starts. On the CPU with a fixed seed, a
    resumed run ends with the very weights of one never interrupted.

    **train/loss**, rather than `self.log` in `training_step`: Lightning's bookkeeping of a logged
    value runs at every call, written or not (about 7% of the example's CPU step,
    benchmarks/README.md), and the progress bar reads it back at every step, a device sync on a
    GPU. Here it is logged only on the steps Lightning writes, as a number already on the CPU.
    """

    def __init__(self, train_loss: str | None = "train/loss", saves_last: bool = True) -> None:
        """`train_loss`: the name `training_step`'s returned loss is logged under (null: not
        logged, for a module that logs its own). `saves_last`: whether a LastCheckpoint keeps the
        last good state (the NaN message says so)."""
        self.train_loss, self.saves_last = train_loss, saves_last
        self._device = torch.device("cpu")
        self._saved_random_state: dict[str, Any] | None = None
        self._distributed = False
        # Stops: idle -> before (setup) -> training -> after (training over) or stopping (an
        # exception) -> done (teardown).
        self._phase: Phase = "idle"
        self._lightning_sigterm: Any = None  # Lightning's SIGTERM handler, called (not signalled)
        self._forwarding = False  # calling it: its call back into ours is ignored
        self._validating = self._deferred = False  # a stop waiting for the validation's end
        self._requested = False  # a stop signal reached this rank
        self._stop_at_step_end = False  # ... and this guard (not Lightning) stops the run
        self._ctrl_c = False  # ... and it was Ctrl-C: a second one aborts at once
        self._requeue = False  # ... and it was SLURM's warning before the time limit
        # NaN: the buffers and their copies; one entry per backward pass since the last optimizer
        # step (loss, verdict, when it is ready); the non-finite losses among them, once read.
        self._buffers: list[Tensor] = []
        self._saved_buffers: list[Tensor] = []
        self._pending: list[tuple[Tensor, Tensor | bool, torch.cuda.Event | None]] = []
        self._bad_losses: list[Tensor] = []
        # Under DDP, the step's vote: taken in this step, at which global step, and its answers.
        self._voted = self._any_rank_stops = self._any_rank_bad = False
        self._voted_at: int | None = None

    # -- set-up and the random state --------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._device = trainer.strategy.root_device
        self._distributed = trainer.world_size > 1
        if stage == "fit" and threading.current_thread() is threading.main_thread():
            self._take_signals(trainer)  # signals reach the main thread only

    def state_dict(self) -> dict[str, Any]:
        kind, keys, position, has_gauss, cached = cast(
            tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True)
        )
        on_gpu = self._device.type == "cuda"  # this rank's GPU only: never wake the others
        version, numbers, gauss = random.getstate()
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(self._device) if on_gpu else None,
            # Plain types and tensors only: checkpoints load with torch.load(weights_only=True).
            "numpy": {"keys": torch.from_numpy(keys.copy()), "rest": [kind, position, has_gauss, cached]},
            # Python's 625 numbers as one tensor: pickled one by one they made up half the objects
            # of each checkpoint write.
            "python": {
                "version": version,
                "numbers": torch.tensor(numbers, dtype=torch.int64),
                "gauss": gauss,
            },
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_random_state = state_dict  # put back in on_train_start

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._saved_random_state is not None:
            restore_random_state(self._saved_random_state, self._device)
            self._saved_random_state = None
        # Found once: walking the modules at every step would cost more than the copies.
        self._buffers = [buffer for buffer in pl_module.buffers() if buffer.is_floating_point()]
        self._saved_buffers = [buffer.detach().clone() for buffer in self._buffers]
        self._pending, self._bad_losses = [], []
        self._distributed = trainer.world_size > 1
        self._voted = self._any_rank_stops = self._any_rank_bad = False
        self._voted_at = None
        if self._phase != "before":
            return
        # Lightning's handler (which calls ours too) is replaced by ours alone; ours calls it.
        current = signal.getsignal(signal.SIGTERM)
        self._lightning_sigterm = current if current != self._on_signal else None
        signal.signal(signal.SIGTERM, self._on_signal)
        self._phase = "training"
        if self._requested and not self._distributed:  # a signal arrived before training started
            raise StopRequested(requeue=self._requeue)  # (under DDP: at the first step's end)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loader = trainer.train_dataloader
        for sampler in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(trainer.current_epoch)

    # -- each step ---------------------------------------------------------------------------

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._pending:  # accumulating into the same step: keep the buffers saved before it
            return
        for saved, buffer in zip(self._saved_buffers, self._buffers, strict=True):
            saved.copy_(buffer)  # buffers take no part in autograd: no torch.no_grad() needed

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        loss = loss.detach()
        ready = None
        finite: Tensor | bool
        if loss.device.type == "cpu":  # nothing to wait for: a number now costs less than a tensor op
            finite = math.isfinite(loss.item()) if loss.numel() == 1 else bool(loss.isfinite().all())
        else:
            finite = torch.isfinite(loss).all()
            if finite.is_cuda:  # copied without waiting; the event marks its landing
                finite = finite.to("cpu", non_blocking=True)
                ready = torch.cuda.Event()
                ready.record()
        self._pending.append((loss, finite, ready))

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        bad_here = self._read_verdicts()
        bad = bad_here
        if self._distributed and self._voted_at != trainer.global_step:  # once a step (a GAN has two)
            self._voted_at = trainer.global_step
            stops, bad = self._vote(trainer, self._requested, bad_here)
            self._voted, self._any_rank_stops = True, self._any_rank_stops or stops
            self._any_rank_bad = bad
        elif self._distributed:
            bad = self._any_rank_bad
        bad_losses, self._bad_losses = self._bad_losses, []
        if not bad:
            return
        for saved, buffer in zip(self._saved_buffers, self._buffers, strict=True):
            buffer.copy_(saved)
        value = f"{bad_losses[0].item()}" if bad_losses else "not finite on another rank"
        kept = ", and last.ckpt holds the last good state" if self.saves_last else ""
        raise NonFiniteLossError(
            f"the training loss is {value} at step {trainer.global_step} (epoch {trainer.current_epoch}); "
            f"training stopped before it changed the weights{kept}. Try a lower learning rate, gradient "
            "clipping (--trainer.gradient_clip_val=1.0), or check the data."
        )

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        voted, self._voted = self._voted, False
        if batch_idx + 1 < trainer.num_training_batches:  # not an epoch's last step: see above
            if self._distributed:  # a step without an optimizer step took no vote: agree here
                stop = self._any_rank_stops or (
                    not voted and trainer.strategy.reduce_boolean_decision(self._requested, all=False)
                )
            else:
                stop = self._stop_at_step_end
            if stop:
                raise StopRequested(requeue=self._requeue)
        if self.train_loss is not None:
            self._log_loss(trainer, pl_module, outputs)

    def _log_loss(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any) -> None:
        every = trainer.log_every_n_steps
        # Lightning's own rule (its logger connector): global_step has just counted this step.
        written = every > 0 and (trainer.global_step % every == 0 or trainer.should_stop)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not ((written or trainer.fast_dev_run) and isinstance(loss, Tensor)):
            return
        # Lightning passes on the loss divided by accumulate_grad_batches: log the one returned.
        value = loss.detach().cpu() * trainer.accumulate_grad_batches
        pl_module.log(cast(str, self.train_loss), value, prog_bar=True, on_step=True, on_epoch=False)

    def _read_verdicts(self) -> bool:
        """Whether this rank had a non-finite loss since the last optimizer step (waits for the GPU's)."""
        pending, self._pending = self._pending, []
        for loss, finite, ready in pending:
            if ready is not None:
                ready.synchronize()
            if not finite:
                self._bad_losses.append(loss)
        return bool(self._bad_losses)

    @staticmethod
    def _vote(trainer: L.Trainer, stop_here: bool, bad_here: bool) -> tuple[bool, bool]:
        """(any rank asked to stop, any rank's loss not finite): one all-reduce for both, about
        1 ms a step between two CPU processes and a host sync on a GPU (benchmarks/README.md)."""
        votes = torch.tensor([float(stop_here), float(bad_here)], device=trainer.strategy.root_device)
        stops, bad = trainer.strategy.reduce(votes, reduce_op="sum").tolist()
        return stops > 0, bad > 0

    # -- validation, the end, errors ------------------------------------------------------------

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = not trainer.sanity_checking and not self._distributed

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = False
        if self._deferred:  # now Lightning stops after this step, saving on the way out
            self._deferred = False
            self._pass_to_lightning(signal.SIGTERM, None)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the last step Lightning no longer stops for a signal: a request that came in
        # since (or during the final validation) still ends the run as stopped, on every rank.
        if self._phase != "training":
            return
        if self._distributed:
            stop = trainer.strategy.reduce_boolean_decision(self._requested, all=False)
        else:
            stop = self._requested
        self._phase = "after"
        if stop:
            raise StopRequested(requeue=self._requeue)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, error: BaseException) -> None:
        # An error on one DDP rank: the other ranks wait in a collective that will never
        # complete. The main process ends the ones it started (Lightning does the same on
        # Ctrl-C); torchrun and SLURM's srun --kill-on-bad-exit end theirs.
        if self._phase != "idle":
            self._phase = "stopping"  # a signal now must not cut short the saves on the way out
        if self._distributed and not is_collective_stop(error):
            internals.end_other_ranks(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # The handlers stay: a signal from now until the process exits still means "stopped"
        # (exit code 143), never death by the default action.
        if self._phase == "idle":
            return
        late_stop = self._phase == "after" and self._requested  # a DDP rank signalled after training
        self._phase = "done"
        self._lightning_sigterm = None
        if late_stop:  # every collective is over: this rank can stop alone
            raise StopRequested(requeue=self._requeue)

    # -- signals -------------------------------------------------------------------------------

    def _take_signals(self, trainer: L.Trainer) -> None:
        """Install the handlers, before Lightning installs its own: it puts back what it found
        (ours) when its loop ends, where it would otherwise put back the default action."""
        self._phase = "before"
        self._requested = self._stop_at_step_end = self._ctrl_c = self._requeue = self._deferred = False
        signums: list[int] = [signal.SIGINT, signal.SIGTERM]
        requeue_signal = slurm_requeue_signal(trainer)
        if requeue_signal is not None:  # Lightning's would save and requeue inside the handler
            signums.append(requeue_signal)
        else:
            early_signal.release()
        for signum in signums:
            signal.signal(signum, self._on_signal)
        if early_signal.take():  # SLURM's warning during start-up: stop as soon as training can
            self._on_signal(requeue_signal or signal.SIGTERM, None)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._forwarding or self._phase == "idle":  # Lightning's handler calling ours back
            return
        if signum == signal.SIGINT:
            if self._ctrl_c:
                raise KeyboardInterrupt  # the second Ctrl-C: abort at once
            self._ctrl_c = True
            rank_zero_info("\nCtrl-C: finishing this step and saving last.ckpt (again: abort at once).")
        elif signum != signal.SIGTERM:
            self._requeue = True
            print(f"SLURM's time-limit warning on PID {os.getpid()}: stopping to requeue.", flush=True)
        first = not self._requested
        self._requested = True
        if self._phase == "done" or (self._phase == "after" and not self._distributed):
            raise StopRequested(requeue=self._requeue)  # training is over, its state saved or saving
        if self._phase in ("after", "stopping"):
            return  # a DDP rank: the last collectives first, it stops at teardown; or saving already
        if self._phase == "before":
            if first:
                print(f"Stop requested on PID {os.getpid()}: stopping when training starts.", flush=True)
            self._stop_at_step_end = True
            if not self._distributed:
                self._pass_to_lightning(signal.SIGTERM, frame)
            return
        if self._distributed or signum not in (signal.SIGINT, signal.SIGTERM) or not self._lightning_sigterm:
            self._stop_at_step_end = True
            if first:
                name = signal.Signals(signum).name
                print(f"Received {name} on PID {os.getpid()}: every rank stops after this step.", flush=True)
            return
        if self._validating and not self._deferred:
            self._deferred = True
            rank_zero_info("\nStop requested: finishing this validation first, then saving last.ckpt.")
            return
        self._deferred = False
        self._pass_to_lightning(signal.SIGTERM, frame)

    def _pass_to_lightning(self, signum: int, frame: Any) -> None:
        """Lightning's own SIGTERM handler, called directly: it notes the stop for its loops."""
        handler = self._lightning_sigterm if self._phase == "training" else signal.getsignal(signal.SIGTERM)
        if not callable(handler) or handler == self._on_signal:
            return
        self._forwarding = True
        try:
            handler(signum, frame)
        finally:
            self._forwarding = False


def restore_random_state(state: dict[str, Any], device: torch.device) -> None:
    """Put back the generators `FitGuard.state_dict` saved (Python's also in the older tuple form)."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    kind, position, has_gauss, cached = state["numpy"]["rest"]
    np.random.set_state((kind, state["numpy"]["keys"].numpy(), position, has_gauss, cached))
    saved = state["python"]
    if not isinstance(saved, tuple):
        saved = saved["version"], tuple(saved["numbers"].tolist()), saved["gauss"]
    random.setstate(saved)
