"""Which PyTorch build this project installs, and the pip command that installs it.

PyTorch publishes one wheel per CUDA version on its own package index; pip alone would pick
PyPI's default build. Standard library only, on purpose: the noxfile and the doctor load this
file before (or without) torch being importable.
"""

import shutil
import subprocess
import sys

TORCH_BUILD = "{{ cookiecutter.torch_build }}"  # chosen when the project was generated
TESTED_TORCH_VERSION = "2.13.0"  # the release the test sessions pin

INDEX = "https://download.pytorch.org/whl"
BUILDS = ("cpu", "cu126", "cu128", "cu130")  # oldest CUDA first


def cuda_version(build: str) -> tuple[int, int] | None:
    """The CUDA version a build targets (`cu128` -> (12, 8)); None for the CPU build."""
    _check(build)
    if build == "cpu":
        return None
    digits = build.removeprefix("cu")
    return int(digits[:-1]), int(digits[-1])


def index_url(build: str) -> str:
    """PyTorch's package index for a build, e.g. https://download.pytorch.org/whl/cu128."""
    _check(build)
    return f"{INDEX}/{build}"


def pip_install_command(build: str = TORCH_BUILD) -> str:
    """The exact command that installs torch in this build."""
    return f"pip install torch --index-url {index_url(build)}"


def pip_requirement(build: str, version: str = TESTED_TORCH_VERSION, index: str | None = None) -> list[str]:
    """pip arguments that install exactly this build of torch `version`.

    The build label is part of the pin (`torch==2.13.0+cpu`), so no other variant can slip in
    whatever the index offers. `index=""` leaves the choice of index to pip's configuration
    (a mirror or a wheelhouse); None uses PyTorch's index for the build.
    """
    _check(build)
    labelled = build != "cpu" or sys.platform.startswith("linux")  # macOS wheels carry no +cpu label
    requirement = f"torch=={version}+{build}" if labelled else f"torch=={version}"
    index = index_url(build) if index is None else index
    return [requirement, "--index-url", index] if index else [requirement]


def nvidia_gpu_count() -> int:
    """NVIDIA GPUs that nvidia-smi lists (0 without a driver): no torch needed to ask."""
    if shutil.which("nvidia-smi") is None:
        return 0
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return 0
    return sum(line.startswith("GPU ") for line in result.stdout.splitlines())


def _check(build: str) -> None:
    if build not in BUILDS:
        raise ValueError(f"Unknown torch build {build!r}: choose one of {', '.join(BUILDS)}.")
