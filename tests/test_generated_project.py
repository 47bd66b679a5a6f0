"""A rendered project installs, passes its own tests, and its example really learns."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import render

# Every option value appears in at least one combination.
VARIANTS = [
    {"license": "MIT", "torch_build": "cpu", "python_version": "3.10"},
    {
        "license": "Apache-2.0",
        "torch_build": "cu126",
        "python_version": "3.11",
        "project_name": "My Cool Project",
    },
    {"license": "BSD-3-Clause", "torch_build": "cu128", "python_version": "3.12"},
    {
        "license": "Proprietary",
        "torch_build": "cu130",
        "python_version": "3.13",
        "task": "tabular_regression",
    },
]


def run(
    *command: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def pip_install(project: Path, python_version: str) -> None:
    """Editable install without dependencies: the test environment already has them."""
    flags = ["--no-deps", "--quiet"]
    if tuple(map(int, python_version.split("."))) > sys.version_info[:2]:
        # The code is identical for every Python choice; only the declared minimum differs,
        # and this machine's torch wheel exists for the running Python alone.
        flags.append("--ignore-requires-python")
    run(sys.executable, "-m", "pip", "install", *flags, "-e", project, cwd=project)


# The tests an option can change: the torch build (doctor, GPU sessions), the package name
# (every import, the class paths in configs/), the entry points. Every variant runs these; the
# renamed one also collects every test module, which imports each module of the package under
# its new name (CI's cpu session runs the default project's whole suite).
OPTION_SENSITIVE = ["tests/kit/test_torch_build.py", "tests/kit/test_doctor.py", "tests/test_main.py"]


@pytest.mark.parametrize(
    "variant", VARIANTS, ids=lambda v: "-".join(v[k] for k in ("license", "torch_build"))
)
def test_every_option_renders_a_project_that_installs_and_passes_its_fast_tests(tmp_path, variant):
    project = render(tmp_path, **variant)
    pip_install(project, variant["python_version"])
    quick = ["-q", "-m", "not slow and not gpu", "-p", "no:cacheprovider"]
    result = run(sys.executable, "-m", "pytest", *quick, *OPTION_SENSITIVE, cwd=project)
    assert " passed" in result.stdout and "failed" not in result.stdout
    if "project_name" in variant:  # exit code 0 (run checks it): no module failed to import
        collected = run(
            sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", cwd=project
        )
        assert re.search(r"\b\d{3,} tests collected", collected.stdout), collected.stdout[-2000:]


@pytest.mark.slow
def test_default_example_reaches_97_percent_test_accuracy(tmp_path):
    project = render(tmp_path)
    pip_install(project, "3.11")
    quiet = "--trainer.enable_progress_bar=false"
    run(sys.executable, "main.py", "fit", quiet, cwd=project)
    result = run(sys.executable, "main.py", "test", "--ckpt_path=best", quiet, cwd=project)
    accuracy = float(re.search(r"test/acc\W+([0-9.]+)", result.stdout).group(1))
    assert accuracy >= 0.97, result.stdout


# The regression example's own tests. The generic ones it shares with the classifier (Lightning's
# documented command lines, presets, loader settings on resume) run on the default project in
# the cpu session; the console check stays, since its warnings depend on the example.
REGRESSION_TESTS = [
    "tests/test_data.py",
    "tests/test_model.py",
    "tests/test_network.py",
    "tests/test_example.py",
    "tests/test_distributed.py",
    "tests/test_quiet_console.py",
]


@pytest.mark.slow
def test_regression_example_passes_its_own_tests_and_beats_a_linear_fit(tmp_path):
    """The second example, rendered and installed like the first; its tests train it with the
    defaults (test R² at least a linear fit's 0.45), predict, export, serve, sweep, resume after
    SIGTERM and SIGKILL, and run DDP on the CPU. Every extra they use must be installed."""
    project = render(tmp_path, task="tabular_regression")
    pip_install(project, "3.11")
    pytest_args = ["-q", "-p", "no:cacheprovider", "-m", "not gpu", "-n", "2", *REGRESSION_TESTS]
    environment = {**os.environ, "KIT_TESTS_NEED_EXTRAS": "1"}
    result = run(sys.executable, "-m", "pytest", *pytest_args, cwd=project, timeout=1200, env=environment)
    assert " passed" in result.stdout and "failed" not in result.stdout and "skipped" not in result.stdout
