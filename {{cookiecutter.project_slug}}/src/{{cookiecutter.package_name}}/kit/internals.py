"""The kit's uses of Lightning, torch or Optuna behaviour that no public API offers, one function each.

Each says why it is needed; `tests/kit/test_internals.py` fails loudly when Lightning changes
what it relies on. Add here rather than anywhere else in the kit.
"""

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

import lightning as L


def end_other_ranks(trainer: L.Trainer) -> None:
    """Kill at once the DDP ranks that this process started (none elsewhere: a no-op).

    Why: after an error on one rank alone, the others wait for ever in a collective that will
    never complete. Lightning ends them the same way on Ctrl-C (`strategy.launcher.kill`), a
    method of its launchers that is not documented as public. torchrun and SLURM's
    `srun --kill-on-bad-exit` end the ranks they started themselves.
    """
    launcher = trainer.strategy.launcher
    if launcher is not None:
        launcher.kill(signal.SIGKILL)


@contextlib.contextmanager
def logging_switched_off(module: L.LightningModule) -> Iterator[None]:
    """`self.log` and `self.log_dict` do nothing inside: for steps that are not training.

    Why: the batch-size tuner calls `training_step` outside Lightning's loops, where `self.log`
    raises (no result collection yet); with the trainer detached it would warn at every call and
    a `training_step` reading `self.trainer` would fail. Lightning has no public switch, so
    instance attributes shadow the two methods for the duration.
    """
    module.log = module.log_dict = lambda *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        del module.log, module.log_dict


def trial_to_report_to(study: Any, frozen: Any) -> Any:
    """The `optuna.trial.Trial` of a RUNNING trial that `study.get_trials` returned (a FrozenTrial),
    to report its metrics and finish it.

    Why: a requeued sweep worker (SLURM) goes on with the trial it was running when it was stopped;
    Optuna offers no public way back from a trial's number to a `Trial` (`study.ask` only makes
    new ones), and the storage id that `Trial` takes is the FrozenTrial's private `_trial_id`.
    """
    import optuna

    return optuna.trial.Trial(study, frozen._trial_id)


def subcommand_defaults(cli: Any, subcommand: str) -> Any:
    """One subcommand's settings before any flag, its default config files read, not validated.

    Why: to tell whether the user asked for an optimizer (`KitCLI.choose_optimizers`) the kit
    compares the parsed config with these. In subclass mode the module chosen may not take the
    default module's settings, so they need not validate as a whole; LightningCLI keeps each
    subcommand's parser only in a private dict (`_subcommand_parsers`).
    """
    return cli._subcommand_parsers[subcommand].get_defaults(skip_validation=True)


def logging_step(trainer: L.Trainer) -> int:
    """The step Lightning's own logging puts a scalar at (the optimizer steps taken so far).

    Why: a scalar a callback logs to the loggers directly (the best score so far) belongs on the
    same x-axis as the module's `self.log` curves; Lightning's LearningRateMonitor reads the same
    counter, which has no public name (`trainer.global_step` counts each optimizer of a GAN).
    """
    return trainer.fit_loop.epoch_loop._batches_that_stepped
