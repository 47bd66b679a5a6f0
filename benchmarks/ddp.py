"""DDP: what the kit's `fit` costs under DDP, next to stock Lightning, and how both scale.

Four runs per round, in rotating order, each a process of its own on the synthetic workload
(12,800 random images of the example's shape, the project's own loaders, 64 a batch per device):
- `stock`: Lightning with everything off around the project's model (throughput's `lightning_model`);
- `kit`: `python main.py fit` as shipped;
each on one device (no DDP: the reference) and with DDP over N processes started by `torchrun`:
every GPU where there are two or more, else 2 CPU processes (gloo), so that a CPU machine measures
the same code path. A machine with one GPU has nothing to scale to: the measurement says so.

Figures, from rank 0, medians over the epochs after the first: time a training step, samples a
second (all ranks), scaling efficiency (N processes' samples a second over N times one device's)
and the kit's step time over stock's. Under DDP that ratio includes what the kit adds at every
step on top of Lightning's own gradient all-reduce: its ranks agree on the NaN verdict and on a
stop request (one small collective each).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch

from .project import TEMPLATE_DIR, import_module, project_env
from .throughput import run_cli, synthetic_datamodule

SAMPLES = 12_800
EPOCHS = 4
RUNS = ("stock", "kit")


class EpochClock(L.Callback):
    """Times the training part of each epoch on this rank (its queued GPU work included); rank 0
    writes the times to `output` when training ends."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.seconds: list[float] = []
        self._started: float | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sync(pl_module)
        self._started = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop(pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop(pl_module)  # when no validation ran this epoch

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            figures = {
                "train_seconds": self.seconds,
                "steps_per_epoch": trainer.num_training_batches,
                "world_size": trainer.world_size,
                "device": str(pl_module.device),
            }
            self.output.write_text(json.dumps(figures))

    def _stop(self, pl_module: L.LightningModule) -> None:
        if self._started is None:  # the sanity check's validation, or already stopped
            return
        self._sync(pl_module)
        self.seconds.append(time.perf_counter() - self._started)
        self._started = None

    @staticmethod
    def _sync(pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)


def worker(
    project: Path, run: str, processes: int, accelerator: str, output: Path, precision: str | None
) -> None:
    """One run, in each of its processes (started by torchrun when `processes` > 1)."""
    base = import_module(project, "data").DigitsDataModule
    datamodule = synthetic_datamodule(base, SAMPLES)
    clock = EpochClock(output)
    strategy, devices = ("ddp", processes) if processes > 1 else ("auto", 1)

    def train(cli: Any) -> None:
        if run == "kit":
            cli.trainer.callbacks.append(clock)
            cli.trainer.fit(cli.model, datamodule)
            return
        trainer = L.Trainer(
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            max_epochs=EPOCHS,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[clock],
            precision=cli.trainer.precision,
        )
        trainer.fit(cli.model, datamodule)

    flags = [
        f"--trainer.max_epochs={EPOCHS}",
        f"--trainer.accelerator={accelerator}",
        f"--trainer.strategy={strategy}",
        f"--trainer.devices={devices}",
    ]
    if precision:
        flags.append(f"--trainer.precision={precision}")
    # Every process of the run in one folder (torchrun's working directory): one run folder.
    run_cli(project, flags, train, folder=Path.cwd())


def ddp_processes() -> tuple[str, int] | str:
    """(accelerator, processes) for the DDP runs, or why there is nothing to scale to."""
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        return "gpu", gpus
    if gpus == 1:
        return "one GPU: DDP scaling needs two or more (the throughput and cost tables cover one GPU)"
    return "cpu", 2


def one_run(
    project: Path,
    run: str,
    processes: int,
    accelerator: str,
    precision: str | None,
    log: Callable[[str], None],
) -> dict:
    """Start one run in a fresh folder; its rank 0's figures."""
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        output = Path(tmp) / "figures.json"
        args = ["--worker", run, "--project", str(project), "--processes", str(processes)]
        args += ["--accelerator", accelerator, "--output", str(output)]
        if precision:
            args += ["--precision", precision]
        if processes > 1:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command = [*launcher, f"--nproc-per-node={processes}", "-m", "benchmarks.ddp", *args]
        else:
            command = [sys.executable, "-m", "benchmarks.ddp", *args]
        env = project_env(project)
        env["PYTHONPATH"] = os.pathsep.join([str(TEMPLATE_DIR), env["PYTHONPATH"]])
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for each of its processes
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not output.is_file():
            raise SystemExit(
                f"error: the {run} run on {processes} process(es) failed:\n{done.stderr[-3000:]}"
            )
        figures = json.loads(output.read_text())
    seconds = figures["train_seconds"][1:]  # the first epoch warms up
    step_ms = statistics.median(seconds) * 1000 / figures["steps_per_epoch"]
    log(f"ddp: {run} on {processes} process(es): {step_ms:.2f} ms a step ({figures['device']})")
    return {**figures, "step_ms": step_ms}


def measure(
    project: Path, rounds: int = 3, log: Callable[[str], None] = print, precision: str | None = None
) -> dict:
    chosen = ddp_processes()
    if isinstance(chosen, str):
        log(f"ddp: skipped, {chosen}")
        return {"skipped": chosen}
    accelerator, processes = chosen
    runs = [(run, count) for run in RUNS for count in (1, processes)]
    steps: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
    for round_ in range(rounds):
        for run, count in runs[round_ % len(runs) :] + runs[: round_ % len(runs)]:
            steps[(run, count)].append(one_run(project, run, count, accelerator, precision, log)["step_ms"])
    result: dict = {"accelerator": accelerator, "processes": processes, "batch_size": 64, "runs": {}}
    for (run, count), values in steps.items():
        step_ms = statistics.median(values)
        samples_per_s = 64 * count * 1000 / step_ms
        result["runs"][f"{run}@{count}"] = {
            "step_ms": step_ms,
            "step_ms_spread": max(values) - min(values),
            "samples_per_s": samples_per_s,
        }
    for run in RUNS:
        one, many = result["runs"][f"{run}@1"], result["runs"][f"{run}@{processes}"]
        many["scaling"] = many["samples_per_s"] / (processes * one["samples_per_s"])
    for count in (1, processes):
        kit, stock = result["runs"][f"kit@{count}"], result["runs"][f"stock@{count}"]
        kit["x_stock"] = kit["step_ms"] / stock["step_ms"]
    return result


HEADER = ["run", "processes", "ms a step (spread)", "samples/s", "scaling", "x stock Lightning"]
LABELS = {"stock": "stock Lightning, everything off, the project's model", "kit": "main.py fit as shipped"}


def rows(result: dict) -> list[list[str]]:
    if "skipped" in result:
        return [[f"skipped: {result['skipped']}", "", "", "", "", ""]]
    table = []
    for run in RUNS:
        for count in (1, result["processes"]):
            figures = result["runs"][f"{run}@{count}"]
            where = f"{count} {result['accelerator'].upper()}{'s' if count > 1 else ''}"
            table.append(
                [
                    LABELS[run],
                    where + (" (DDP)" if count > 1 else ""),
                    "{step_ms:.2f} ({step_ms_spread:.2f})".format(**figures),
                    f"{figures['samples_per_s']:.0f}",
                    f"{figures['scaling']:.2f}" if "scaling" in figures else "",
                    f"x{figures['x_stock']:.3f}" if "x_stock" in figures else "",
                ]
            )
    return table


def main(argv: list[str]) -> None:
    """The worker's entry: `python -m benchmarks.ddp --worker RUN ...` (started by `one_run`)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ddp")
    parser.add_argument("--worker", choices=RUNS, required=True)
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--accelerator", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--precision")
    args = parser.parse_args(argv)
    # As main.py ends a rank: with the run's exit code, never by a gloo group's abort at exit.
    run_and_exit = import_module(args.project, "kit.process_exit").run_and_exit
    with contextlib.redirect_stdout(sys.stderr):
        run_and_exit(
            lambda: worker(
                args.project, args.worker, args.processes, args.accelerator, args.output, args.precision
            )
        )


if __name__ == "__main__":
    main(sys.argv[1:])
