"""Start-up: `main.py --help` and a one-batch `fit` against the floor, `python -c "import lightning"`,
and `fit`'s time to its first training step.

Each command is a fresh process (wall time, median of `repeats`, commands interleaved). When
`--help` costs clearly more than the floor, `python -X importtime` names what it imports beyond it.
The first step's time runs from the process's start to the first training batch's start, the
default config's sanity validation included (`FirstStepClock` prints the moment).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lightning as L

from .project import project_env

HELP_TARGET = 1.2  # --help within 20% of importing Lightning
TEMPLATE_DIR = Path(__file__).resolve().parents[1]
CLOCK_MARK = "first training step at "


class FirstStepClock(L.Callback):
    """Prints the wall clock when the first training batch starts (added with `--trainer.callbacks+=`)."""

    def on_train_batch_start(self, *args: object) -> None:
        print(f"{CLOCK_MARK}{time.time()}", flush=True)


def commands(project: Path) -> dict[str, list[str]]:
    main = str(project / "main.py")
    return {
        "import_lightning": [sys.executable, "-c", "import lightning"],
        "help": [sys.executable, main, "--help"],
        "fast_dev_run": [sys.executable, main, "fit", "--trainer.fast_dev_run=true"],
        "first_step": [
            sys.executable,
            main,
            "fit",
            "--trainer.max_steps=1",
            f"--trainer.callbacks+={FirstStepClock.__module__}.FirstStepClock",
        ],
    }


def wall_time(command: list[str], project: Path, cwd: Path) -> float:
    """Seconds the command took; for one that prints `CLOCK_MARK`, seconds until it did."""
    env = project_env(project)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TEMPLATE_DIR)])  # FirstStepClock's module
    started, started_at = time.perf_counter(), time.time()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    marks = [line for line in done.stdout.splitlines() if line.startswith(CLOCK_MARK)]
    return float(marks[0].removeprefix(CLOCK_MARK)) - started_at if marks else elapsed


def import_times(command: list[str], project: Path, cwd: Path) -> dict[str, float]:
    """Seconds each module took to import itself (`python -X importtime`), by module name."""
    done = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        cwd=cwd,
        env=project_env(project),
        capture_output=True,
        text=True,
    )
    times = {}
    for line in done.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[0].strip().isdigit():
            times[fields[2].strip()] = int(fields[0]) / 1e6
    return times


def imports_beyond_floor(project: Path, cwd: Path, count: int = 8) -> list[tuple[str, float]]:
    """What `--help` imports that `import lightning` does not: seconds per top-level package."""
    floor = import_times(commands(project)["import_lightning"], project, cwd)
    extra: dict[str, float] = {}
    for module, seconds in import_times(commands(project)["help"], project, cwd).items():
        if module not in floor:
            package = module.split(".")[0]
            extra[package] = extra.get(package, 0.0) + seconds
    return sorted(extra.items(), key=lambda item: -item[1])[:count]


def measure(project: Path, repeats: int = 3, log: Callable[[str], None] = print) -> dict:
    times: dict[str, list[float]] = {name: [] for name in commands(project)}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for repeat in range(repeats):
            for name, command in commands(project).items():
                log(f"startup: {name} {repeat + 1}/{repeats}")
                times[name].append(wall_time(command, project, Path(tmp)))
        result: dict = {name: {"s": statistics.median(values)} for name, values in times.items()}
        floor = result["import_lightning"]["s"]
        for name in ("help", "fast_dev_run", "first_step"):
            result[name]["ratio"] = result[name]["s"] / floor
        if result["help"]["ratio"] > HELP_TARGET:
            result["help"]["imports_beyond_floor_s"] = imports_beyond_floor(project, Path(tmp))
    return result


HEADER = ["start-up", "wall", "x import lightning"]


def rows(result: dict) -> list[list[str]]:
    table = []
    for name, figures in result.items():
        table.append(
            [name, f"{figures['s']:.2f} s", f"x{figures['ratio']:.2f}" if "ratio" in figures else ""]
        )
    for package, seconds in result["help"].get("imports_beyond_floor_s", []):
        table.append([f"  help also imports {package}", f"{seconds:.2f} s", ""])
    return table
