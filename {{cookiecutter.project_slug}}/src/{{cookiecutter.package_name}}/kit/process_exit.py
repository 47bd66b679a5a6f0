"""End a DDP rank's process with the exit code its run chose, never with SIGABRT.

A gloo process group still alive when the interpreter exits aborts the process about one exit in
four under load ("terminate called without an active exception", exit -6): its threads race the
C++ teardown. Lightning destroys NCCL groups at exit, not gloo ones, and destroying the group
ourselves can block forever on a peer that stopped alone or died. So a rank in a process group
runs Python's exit handlers, flushes its output and leaves without that teardown.
"""

import atexit
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import torch.distributed

from .errors import EXIT_INTERRUPTED


def run_and_exit(entry: Callable[[], object]) -> None:
    """Run `entry` as the whole process: in a process group, exit with its outcome (0, its
    `SystemExit` code, or 1, 130 for Ctrl-C, after printing the error's traceback, as Python
    would); elsewhere, leave its outcome to Python as it is."""
    try:
        entry()
    except SystemExit as stop:
        code = exit_code(stop)
        if not in_process_group():
            raise
    except BaseException as error:
        if not in_process_group():
            raise
        sys.excepthook(type(error), error, error.__traceback__)
        code = EXIT_INTERRUPTED if isinstance(error, KeyboardInterrupt) else 1
    else:
        if not in_process_group():
            return  # as a script's end: Python exits 0 (or the caller, run in-process, goes on)
        code = 0
    leave(code)


def exit_code(stop: SystemExit) -> int:
    """The code the process ends with for `stop`, as Python reads it (a message counts as 1)."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def in_process_group() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def leave(code: int) -> NoReturn:
    """Exit now with `code`: exit handlers run and output is flushed, C++ objects are not torn down."""
    atexit._run_exitfuncs()  # what Python runs at exit (loader workers, logging, Lightning's own)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
