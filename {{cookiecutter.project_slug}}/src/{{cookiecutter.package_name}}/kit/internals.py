"""The kit's uses of Lightning or torch behaviour that no public API offers, one function each.

Each says why it is needed; `tests/kit/test_internals.py` fails loudly when Lightning changes
what it relies on. Add here rather than anywhere else in the kit.
"""

import signal

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
