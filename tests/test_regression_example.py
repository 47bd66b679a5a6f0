"""The second example, `task=tabular_regression`: rendered, installed and tested like the first.

A file of its own, so pytest-xdist runs it beside tests/test_generated_project.py (each file's
projects are installed into the one test environment; their package names differ).
"""

import os
import sys

import pytest
from conftest import pip_install, render, run

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
