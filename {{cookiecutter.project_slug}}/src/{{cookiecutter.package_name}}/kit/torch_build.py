"""Which PyTorch build this project installs, and the pip and uv commands that install it.

PyTorch publishes one wheel per CUDA version on its own package index; pip alone would pick
PyPI's default build. Standard library only, on purpose: the noxfile and the doctor load this
file before (or without) torch being importable.
"""

import re
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


def uv_install_command(build: str = TORCH_BUILD) -> str:
    """The same with uv: `--reinstall-package` replaces an installed torch of another build.

    For good, change the build in pyproject.toml's `[tool.uv.sources]` and run `uv sync`.
    """
    return f"uv pip install torch --reinstall-package torch --index-url {index_url(build)}"


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


NVIDIA_SMI_TIMEOUT_S = 10  # a healthy nvidia-smi answers in well under a second


def ask_nvidia_smi(*args: str) -> tuple[str, str | None]:
    """nvidia-smi's output and, when it gave none, why (failed, hung); ("", None) without it.

    The one wrapper of nvidia-smi: the doctor (kit/hardware.py) and the noxfiles (which load
    this file by path, so it imports nothing but the standard library) both ask through it.
    """
    path = shutil.which("nvidia-smi")
    if path is None:
        return "", None
    try:
        result = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return "", f"nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT_S} s"
    except OSError as error:
        return "", f"nvidia-smi could not start ({error})"
    if result.returncode != 0:
        detail = (result.stdout + result.stderr).strip().splitlines()
        return "", f"nvidia-smi failed (exit code {result.returncode}{': ' + detail[0] if detail else ''})"
    return result.stdout, None


def nvidia_smi(*args: str) -> str:
    """nvidia-smi's output; "" when it is absent, fails or does not answer in time."""
    return ask_nvidia_smi(*args)[0]


def nvidia_gpu_count() -> int:
    """NVIDIA GPUs that nvidia-smi lists (0 without a working driver): no torch needed to ask.

    This is every GPU of the machine; `CUDA_VISIBLE_DEVICES`, MIG and a CPU-only torch can
    leave torch fewer. Use it to decide whether a CUDA build of torch is worth installing,
    then ask torch (`visible_gpus_command`).
    """
    return sum(line.startswith("GPU ") for line in nvidia_smi("-L").splitlines())


def driver_cuda() -> tuple[int, int] | None:
    """The newest CUDA this machine's NVIDIA driver runs (nvidia-smi's header); None if unknown."""
    match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", nvidia_smi())
    return (int(match[1]), int(match[2])) if match else None


def suggested_build(driver_cuda: tuple[int, int] | None) -> str | None:
    """The project's build if the driver runs it, else the newest CUDA build it runs (None: none)."""
    cuda_builds = [build for build in BUILDS if build != "cpu"]
    if driver_cuda is None:  # unknown limit: the project's choice, or the oldest (most compatible)
        return TORCH_BUILD if TORCH_BUILD != "cpu" else cuda_builds[0]
    runnable = [build for build in cuda_builds if (cuda_version(build) or (0, 0)) <= driver_cuda]
    if TORCH_BUILD in runnable:
        return TORCH_BUILD
    return runnable[-1] if runnable else None


# Run by a session's Python after torch is installed: the GPUs torch itself can use, which
# respects CUDA_VISIBLE_DEVICES and MIG. Prints 0 for a CPU-only torch.
VISIBLE_GPUS_CODE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


def _check(build: str) -> None:
    if build not in BUILDS:
        raise ValueError(f"Unknown torch build {build!r}: choose one of {', '.join(BUILDS)}.")
