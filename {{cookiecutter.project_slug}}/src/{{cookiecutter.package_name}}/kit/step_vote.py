"""One collective a step for what the DDP ranks must decide together before an optimizer step.

Under DDP the kit's callbacks take decisions every rank must take at the same step: whether
any rank's loss was not finite (StopOnNonFiniteLoss), whether any rank was asked to stop
(GracefulInterrupt). Each agreement is a collective that every rank waits at: about 1 ms a
step between two CPU processes, and a host sync on a GPU (benchmarks/README.md, DDP). So
they share one: each callback registers a question when training starts, and the first of them
to call `take` at an optimizer step asks all the questions in one all-reduce; the others are
answered from it. On one device nothing is reduced.
"""

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import lightning as L
import torch


@dataclass
class _Questions:
    asked: dict[str, Callable[[], bool]] = field(default_factory=dict)  # this rank's answer, now
    told: dict[str, Callable[[bool], None]] = field(default_factory=dict)  # whether any rank said yes
    taken_at: int | None = None  # the global step of the last vote


_questions: "weakref.WeakKeyDictionary[L.Trainer, _Questions]" = weakref.WeakKeyDictionary()


def ask(trainer: L.Trainer, name: str, local: Callable[[], bool], tell: Callable[[bool], None]) -> None:
    """From now on, each vote asks `local()` on every rank and calls `tell(any rank said yes)`."""
    questions = _questions.setdefault(trainer, _Questions())
    questions.asked[name], questions.told[name] = local, tell
    questions.taken_at = None


def take(trainer: L.Trainer) -> None:
    """The vote of this optimizer step, unless a callback before this one took it already.

    Every rank has the same callbacks, which register in the same hook: every rank asks the
    same questions, in the order of their names, so the reduced numbers line up.
    """
    questions = _questions.get(trainer)
    if questions is None or questions.taken_at == trainer.global_step:
        return
    questions.taken_at = trainer.global_step
    names = sorted(questions.asked)
    local = [float(questions.asked[name]()) for name in names]
    if trainer.world_size > 1:
        votes = torch.tensor(local, device=trainer.strategy.root_device)
        local = trainer.strategy.reduce(votes, reduce_op="sum").tolist()
    for name, yes in zip(names, local, strict=True):
        questions.told[name](yes > 0)
