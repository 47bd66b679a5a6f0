"""Time to 97% test accuracy on the built-in example, from a cold start (fresh processes).

`recipe`: the default `python main.py fit`, then `python main.py test --ckpt_path=best`.
`early_stop`: the same, but fit stops as soon as validation accuracy reaches the target
(Lightning's EarlyStopping with `stopping_threshold`), as a user chasing the target would.
"""

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .project import project_env

TARGET = 0.97
EARLY_STOP_FLAGS = [
    "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
    "--trainer.callbacks.monitor=val/acc",
    "--trainer.callbacks.mode=max",
    f"--trainer.callbacks.stopping_threshold={TARGET}",
    "--trainer.callbacks.patience=1000",
]
TEST_ACCURACY = re.compile(r"test/acc\W+([0-9.]+)")
BEST_EPOCH = re.compile(r"best-epoch(\d+)")  # callbacks.BestCheckpoint's file name


def run(project: Path, cwd: Path, *args: str) -> tuple[float, str]:
    """Wall seconds and stdout of `python main.py ARGS` in `cwd`."""
    command = [sys.executable, str(project / "main.py"), *args, "--trainer.enable_progress_bar=false"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=project_env(project), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def fit_then_test(project: Path, fit_flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
        fit_s, _ = run(project, Path(tmp), "fit", *fit_flags)
        test_s, output = run(project, Path(tmp), "test", "--ckpt_path=best")
        best = [path.name for path in Path(tmp).glob("logs/**/best-epoch*.ckpt")]
    found = TEST_ACCURACY.search(output)
    accuracy = float(found.group(1)) if found else None
    return {
        "fit_s": fit_s,
        "test_s": test_s,
        "total_s": fit_s + test_s,
        "test_acc": accuracy,
        "reached": accuracy is not None and accuracy >= TARGET,
        "best_epoch": int(BEST_EPOCH.search(best[0]).group(1)) if len(best) == 1 else None,
    }


def measure(project: Path, log: Callable[[str], None] = print) -> dict:
    result = {}
    for name, flags in (("recipe", []), ("early_stop", EARLY_STOP_FLAGS)):
        log(f"accuracy: {name}")
        result[name] = fit_then_test(project, flags)
    return result


HEADER = [f"time to {TARGET:.0%}", "wall: fit + test", "test/acc", "best epoch"]


def rows(result: dict) -> list[list[str]]:
    table = []
    for name, figures in result.items():
        accuracy = "not found" if figures["test_acc"] is None else f"{figures['test_acc']:.4f}"
        if not figures["reached"]:
            accuracy += f" (MISSED {TARGET:.0%})"
        times = "{total_s:.1f} s ({fit_s:.1f} + {test_s:.1f})".format(**figures)
        table.append([name, times, accuracy, str(figures["best_epoch"])])
    return table
