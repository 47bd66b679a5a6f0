"""The cost table: the default `fit` with one always-on feature off at a time.

Each row is a run of `throughput.py`'s kind (the plain loop in lockstep), as a ratio to the plain
loop and to stock Lightning with everything off (`lightning_floor`), per training step (the
training part of an epoch) and per whole epoch (validation, checkpoints and logging included).
What a feature costs is the default's ratio less the row's. `lightning_model` is stock Lightning
with everything off around the project's own model: what its metrics and logging cost, apart
from the kit's; `lightning_idle_callbacks` adds as many callbacks that do nothing as the default
`fit` has: what Lightning charges for calling them at every hook, before any of them does work.
"""

from collections.abc import Callable
from pathlib import Path

from .throughput import FEATURES, WORKLOADS, measure_workload

STOCK = ("lightning_floor", "lightning_model", "lightning_idle_callbacks")
RUNS = (*STOCK, "fit_default", *FEATURES, "fit_bare")
LABELS = {
    "lightning_floor": "stock Lightning, everything off",
    "lightning_model": "stock Lightning, everything off, the project's model",
    "lightning_idle_callbacks": "stock Lightning, the project's model, fit's number of idle callbacks",
    "fit_default": "main.py fit as shipped",
    "fit_bare": "fit, every option off",
    **{run: f"fit without {feature.label}" for run, feature in FEATURES.items()},
}


def measure(
    project: Path, rounds: int = 3, log: Callable[[str], None] = print, precision: str | None = None
) -> dict:
    return {
        workload.name: measure_workload(project, workload, rounds, log, RUNS, precision)
        for workload in WORKLOADS
    }


HEADER = [
    "workload",
    "run",
    "x plain: step / epoch",
    "spread",
    "x Lightning: step / epoch",
    "feature costs: step / epoch",
]


def rows(result: dict) -> list[list[str]]:
    """Per workload and run: median ratios to the plain loop (and the rounds' spread of them), to
    stock Lightning, and what the feature the row turns off adds to the default (x plain)."""
    table = []
    for workload, figures in result.items():
        floor, default = figures["lightning_floor"], figures["fit_default"]
        for run in RUNS:
            run_figures = figures[run]
            step, epoch = run_figures["train_ratio"], run_figures["epoch_ratio"]
            cost = ""
            if run in FEATURES:
                cost = f"{default['train_ratio'] - step:+.3f} / {default['epoch_ratio'] - epoch:+.3f}"
            table.append(
                [
                    f"{workload}: {figures['steps_per_epoch']} steps",
                    LABELS[run],
                    f"x{step:.3f} / x{epoch:.3f}",
                    "{train_ratio_spread:.3f} / {epoch_ratio_spread:.3f}".format(**run_figures),
                    f"x{step / floor['train_ratio']:.3f} / x{epoch / floor['epoch_ratio']:.3f}",
                    cost,
                ]
            )
    return table
