"""The uv route: `uv sync` installs a rendered project with torch in the build chosen at generation.

Each build pins torch to PyTorch's index for that build, marked explicit, so nothing else comes
from it and torch comes from nowhere else: a CPU project never gets a CUDA wheel by accident.
The end-to-end test points that index at a one-package index made from the local CPU wheel
(this machine cannot reach PyTorch's index), the way a user behind a mirror would.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from conftest import TORCH_BUILDS, render

UV = shutil.which("uv")


@pytest.mark.parametrize("torch_build", TORCH_BUILDS)
def test_each_build_takes_torch_from_its_own_explicit_index_only(tmp_path, torch_build):
    pyproject = tomllib.loads((render(tmp_path, torch_build=torch_build) / "pyproject.toml").read_text())

    names = [re.split(r"[<>=\[ ;]", requirement)[0] for requirement in pyproject["project"]["dependencies"]]
    assert "torch" not in names, "pip would pull PyPI's default (CUDA) build"
    assert [re.split(r"[<>=]", req)[0] for req in pyproject["dependency-groups"]["torch"]] == ["torch"]
    assert pyproject["tool"]["uv"]["default-groups"] == ["torch"]
    (source,) = pyproject["tool"]["uv"]["sources"]["torch"]
    (index,) = pyproject["tool"]["uv"]["index"]
    assert source["index"] == index["name"] == f"pytorch-{torch_build}"
    assert index["url"] == f"https://download.pytorch.org/whl/{torch_build}"
    assert index["explicit"] is True


def local_cpu_torch_wheel() -> Path | None:
    """The CPU torch wheel in a local wheelhouse (uv's or pip's find-links), if there is one."""
    folders = os.environ.get("UV_FIND_LINKS", "").split(",") + os.environ.get("PIP_FIND_LINKS", "").split()
    for folder in filter(None, folders):
        wheels = sorted(Path(folder.removeprefix("file://")).glob("torch-*+cpu-*.whl"))
        if wheels:
            return wheels[-1]
    return None


@pytest.mark.slow
def test_uv_sync_installs_the_cpu_build_and_uv_run_trains(tmp_path):
    wheel = local_cpu_torch_wheel()
    if UV is None or wheel is None:
        pytest.skip("needs uv (pip install uv) and a local CPU torch wheel (UV_FIND_LINKS or PIP_FIND_LINKS)")
    simple = tmp_path / "simple" / "torch"
    simple.mkdir(parents=True)
    (simple / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>')
    project = render(tmp_path / "rendered")
    # Not nox's environment: nox points uv's project commands at its session's venv
    # (UV_PROJECT_ENVIRONMENT), which `uv sync` would strip to this project's dependencies.
    # Nor its UV_COMPILE_BYTECODE, with which uv compiles at every `uv run` (astral-sh/uv#12202):
    # a user's machine has neither; the project's README compiles once, at `uv sync`.
    nox_only = ("UV_PROJECT_ENVIRONMENT", "UV_COMPILE_BYTECODE")
    outside = {key: value for key, value in os.environ.items() if key not in nox_only}
    environment = {
        **outside,
        # The project's own index, by its name, pointed at the local copy (as behind a mirror).
        "UV_INDEX": f"pytorch-cpu={(tmp_path / 'simple').as_uri()}",
        "UV_FIND_LINKS": "",  # torch from the named index only, as on a user's machine
        "VIRTUAL_ENV": "",
    }

    def uv(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [UV, *args], cwd=project, env=environment, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    uv("sync", "--compile-bytecode", "--quiet")  # the README's install
    torch_version = uv("run", "python", "-c", "import torch; print(torch.__version__)")
    assert torch_version.stdout.strip().endswith("+cpu")
    assert "Bytecode compiled" not in torch_version.stderr, "compiled once, at sync, not at every run"
    quick = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2"]
    uv("run", "main.py", "fit", *quick, "--trainer.enable_progress_bar=false")
    assert list(project.glob("logs/lightning_logs/version_0/checkpoints/last.ckpt"))
