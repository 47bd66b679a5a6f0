"""Shared fixtures of the example's tests: run `main.py` in-process, as a user calls it.

The helpers they share with the kit's tests live in `kit/kit_testing.py` (on the path through
`pythonpath` in pyproject.toml) and are passed on from here: `from conftest import ...` works.
"""

import os
import runpy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kit_testing import (
    PROJECT_ROOT,
    extra,
    requires_gpus,
    tensorboard_points,
    tensorboard_scalars,
    tensorboard_settings,
    visible_gpus,
)

__all__ = [
    "MAIN",
    "PROJECT_ROOT",
    "extra",
    "main_py_environment",
    "main_py_process",
    "main_py_started",
    "requires_gpus",
    "run_main",
    "tensorboard_points",
    "tensorboard_scalars",
    "tensorboard_settings",
    "visible_gpus",
]

MAIN = PROJECT_ROOT / "main.py"


def main_py_environment(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """For `python main.py` in a new process: this interpreter (and its torchrun) first on PATH,
    the project and these tests importable, output unbuffered; without the variables in `drop`."""
    tests = PROJECT_ROOT / "tests"
    paths = [str(PROJECT_ROOT / "src"), str(tests), str(tests / "kit"), os.environ.get("PYTHONPATH", "")]
    return {
        **{key: value for key, value in os.environ.items() if key not in drop},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, paths)),
        "PYTHONUNBUFFERED": "1",
    }


def main_py_process(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python main.py ARGS` in a process of its own, in `cwd`; its output captured."""
    return subprocess.run(
        [sys.executable, str(MAIN), *args],
        cwd=cwd,
        env=main_py_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def main_py_started(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """`python main.py ARGS` started in a process group of its own (a server: stop it with
    `stop_server`), in `cwd`; its output piped."""
    return subprocess.Popen(
        [sys.executable, str(MAIN), *args],
        cwd=cwd,
        env=main_py_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def run_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Call `python main.py ARGS...` in-process, with logs written under a temp folder."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", [str(MAIN), *args])
        runpy.run_path(str(MAIN), run_name="__main__")

    return run
