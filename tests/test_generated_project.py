"""A rendered project installs, passes its own tests, and its example really learns."""

import re
import sys

import pytest
from conftest import pip_install, render, run

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
        "project_name": "Tabular Variant",  # not the default's name: tests/test_regression_example.py
    },
]


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
