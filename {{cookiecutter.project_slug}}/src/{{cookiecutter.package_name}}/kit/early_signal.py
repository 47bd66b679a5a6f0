"""SLURM's warning before the time limit, caught from the process's first moment.

SLURM sends SIGUSR1 (`#SBATCH --signal=SIGUSR1@90`) a while before it ends a job, and the
signal's default action ends the process: arriving while a run starts (imports, data
preparation, DDP set-up) it would end the job with nothing requeued. So `main.py` calls
`catch()` first thing, under SLURM; the signal is only noted here, and acted on as soon as a
clean stop is possible: `FitGuard.setup` (kit/fit_guard.py: training stops at its first step, saves,
requeues) or the sweep (kit/sweep.py). Free of imports: it runs before torch loads.
"""

import os
import signal
from typing import Any

REQUEUE_SIGNAL = signal.SIGUSR1  # Lightning's SLURMEnvironment default (its requeue_signal)
_noted: list[int] = []


def catch() -> None:
    """Note SLURM's warning from now on, in a SLURM job; elsewhere SIGUSR1 keeps its meaning."""
    if "SLURM_JOB_ID" in os.environ:
        signal.signal(REQUEUE_SIGNAL, _note)


def _note(signum: int, frame: Any) -> None:
    if not _noted:
        print(f"SLURM's warning signal during start-up (PID {os.getpid()}): noted.", flush=True)
    _noted.append(signum)


def take() -> bool:
    """Whether the warning arrived since `catch()`; the caller acts on it, so it is told once.
    Whoever calls this installs its own handler first: from then on this one notes nothing."""
    noted = bool(_noted)
    _noted.clear()
    return noted


def release() -> None:
    """Give SIGUSR1 back its default action, where this module still holds it (no requeue asked)."""
    if signal.getsignal(REQUEUE_SIGNAL) is _note:
        signal.signal(REQUEUE_SIGNAL, signal.SIG_DFL)
