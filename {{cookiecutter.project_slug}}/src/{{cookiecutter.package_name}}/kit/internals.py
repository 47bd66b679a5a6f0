"""The kit's uses of Lightning or torch behaviour that no public API offers, one function each.

Each says why it is needed; `tests/kit/test_internals.py` fails loudly when Lightning changes
what it relies on. Add here rather than anywhere else in the kit.
"""

import contextlib
from collections.abc import Iterator

import lightning as L


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
