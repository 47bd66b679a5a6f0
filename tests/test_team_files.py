"""What a team gets besides the code: a CI workflow, pre-commit hooks, and code that passes both.

pre-commit itself is not run here: it fetches its hook repositories from GitHub. Instead the
config's structure is checked, ruff (the tool behind its Python hooks) runs on the rendered
project, and the hygiene hooks' rules (trailing whitespace, one newline at the end, YAML that
parses, no large files) are applied to every rendered file.
"""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import render

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def load_workflow(project: Path) -> dict[str, Any]:
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    # YAML 1.1 reads the key `on` as the boolean True; GitHub reads it as "on".
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def commands(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


@pytest.mark.parametrize("python_version", ["3.10", "3.13"])
def test_ci_workflow_lints_tests_and_runs_ddp_on_the_cpu_build_of_torch(tmp_path, python_version):
    project = render(tmp_path, python_version=python_version)
    workflow = load_workflow(project)

    assert {"push", "pull_request"} <= set(workflow["on"])
    # A string, not the number 3.1: the YAML has to quote the version.
    assert workflow["env"]["PYTHON_VERSION"] == python_version
    assert workflow["concurrency"]["group"] == "${{ github.workflow }}-${{ github.ref }}", "left to GitHub"

    jobs = workflow["jobs"]
    assert set(jobs) == {"lint", "tests", "ddp_cpu"}
    for name, job in jobs.items():
        (setup,) = [step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python@")]
        assert setup["with"]["python-version"] == "${{ env.PYTHON_VERSION }}", name
        assert setup["with"]["cache"] == "pip", name

    assert "ruff check ." in commands(jobs["lint"]) and "ruff format --check ." in commands(jobs["lint"])
    tests = commands(jobs["tests"])
    assert tests.index(f"pip install torch --index-url {CPU_INDEX}") < tests.index('pip install -e ".[dev]"')
    assert 'pytest -m "not gpu and not stress"' in tests
    assert "nox -s ddp_cpu" in commands(jobs["ddp_cpu"])
    assert "def ddp_cpu(" in (project / "noxfile.py").read_text(), "the session CI calls exists"


def test_pre_commit_runs_ruff_and_the_hygiene_hooks_and_is_a_dev_dependency(tmp_path):
    project = render(tmp_path)
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    hooks = {repo["repo"]: {hook["id"] for hook in repo["hooks"]} for repo in config["repos"]}
    assert hooks == {
        "https://github.com/pre-commit/pre-commit-hooks": {
            "trailing-whitespace",
            "end-of-file-fixer",
            "check-yaml",
            "check-added-large-files",
        },
        "https://github.com/astral-sh/ruff-pre-commit": {"ruff-check", "ruff-format"},
    }
    assert all(repo["rev"].startswith("v") for repo in config["repos"]), "every hook repo pinned to a tag"

    # A regular expression, not tomllib: the template's own tools still support Python 3.10.
    assert re.search(r'^dev = \[.*"pre-commit[>=~]', (project / "pyproject.toml").read_text(), re.MULTILINE)


LONGEST_PACKAGE = "acoustic_event_benchmarks_of_2026_v2"  # as long as the hooks allow (36)

# Every licence, and the lowest and highest Python (ruff's rules follow the target version).
VARIANTS = [
    {"license": "MIT", "python_version": "3.10"},
    {"license": "Apache-2.0", "python_version": "3.13", "project_name": "My Cool Project"},
    # Packages named before `conftest` in the alphabet: imports must sort the same.
    {"license": "BSD-3-Clause", "python_version": "3.11", "task": "tabular_regression", "package_name": "ai"},
    {"license": "Proprietary", "python_version": "3.12", "package_name": LONGEST_PACKAGE},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda variant: variant["license"])
def test_a_fresh_project_passes_the_hygiene_hooks_and_ruff(tmp_path, variant):
    project = render(tmp_path, **variant)
    problems = []
    for path in sorted(file for file in project.rglob("*") if file.is_file()):
        name = path.relative_to(project)
        if path.stat().st_size > 500_000:  # check-added-large-files' default limit
            problems.append(f"{name}: larger than 500 kB")
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # binary: the text hooks skip it too
        if any(line != line.rstrip() for line in text.splitlines()):
            problems.append(f"{name}: trailing whitespace")
        if text and (not text.endswith("\n") or text.endswith("\n\n")):
            problems.append(f"{name}: must end with exactly one newline")
        if path.suffix in (".yaml", ".yml"):
            yaml.safe_load(text)  # check-yaml: raises on invalid YAML
    assert not problems, "\n".join(problems)

    for check in (["check", "."], ["format", "--check", "."]):
        # --no-respect-gitignore: the temp folder may sit in an ignored path (nox's .nox/ does).
        command = [sys.executable, "-m", "ruff", *check, "--no-cache", "--no-respect-gitignore"]
        result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"ruff {' '.join(check)}:\n{result.stdout}{result.stderr}"
        assert "No Python files found" not in result.stderr, f"ruff checked nothing in {project}"
