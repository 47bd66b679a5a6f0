"""The generated project's whole default test suite (`pytest -q`), timed. Long: run with --suite."""

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .project import project_env


def measure(project: Path, log: Callable[[str], None] = print) -> dict:
    log("suite: pytest -q (several minutes)")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    return {
        "s": time.perf_counter() - started,
        "exit_code": done.returncode,
        "summary": lines[-1] if lines else "",
    }


HEADER = ["test suite", "wall", "pytest says"]


def rows(result: dict) -> list[list[str]]:
    return [["pytest -q", f"{result['s']:.0f} s", f"{result['summary']} (exit {result['exit_code']})"]]
