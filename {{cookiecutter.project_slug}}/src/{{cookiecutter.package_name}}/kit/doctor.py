"""`python main.py doctor`: what this machine offers for training, and what to fix.

It reports Python, torch and its CUDA build, the GPUs, the NVIDIA driver, NCCL, what
Lightning's `auto` accelerator picks and the CPU cores; then it names known problems with
their fix, e.g. a CPU-only torch on a machine with NVIDIA GPUs. Exit code 1 when it found one.
"""

import argparse
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import TYPE_CHECKING

from .errors import ArgumentParser
from .torch_build import TORCH_BUILD, pip_install_command, suggested_build, uv_install_command

if TYPE_CHECKING:  # imported for real only inside main(), so a broken torch can still be reported
    from .hardware import Driver, Gpu


@dataclass(frozen=True)
class Facts:
    """Everything the doctor looked at, gathered once so reporting and diagnosing stay pure."""

    python: str
    torch: str
    torch_cuda: str | None
    gpus: "list[Gpu]"
    cuda_error: str | None  # why CUDA failed to start, when torch saw GPUs but could not use them
    driver: "Driver | None"
    nccl: str | None
    mps: bool
    auto_accelerator: str
    cpu_cores: int
    nvidia_smi_problem: str | None = None  # nvidia-smi is installed but failed or hung


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str


def main(argv: Sequence[str] = ()) -> int:
    """Print the report and the problems found; 0 when there are none."""
    args = _parse(argv)
    try:
        from . import hardware
    except ImportError as error:  # torch itself is missing or broken
        print(f"torch cannot be imported ({error}). Install this project's build:")
        print(f"    {pip_install_command()}")
        print(f"    or with uv: {uv_install_command()}")
        return 1
    facts = gather(hardware)
    print(report(facts))
    problems = diagnose(facts, args.accelerator)
    for problem in problems:
        print(f"\nPROBLEM: {problem.what}\n    Fix: {problem.fix}")
    if not problems:
        print("\nNo problems found.")
    return 1 if problems else 0


def run() -> None:
    """The `{{ cookiecutter.project_slug }}-doctor` console script: works even where torch is broken."""
    raise SystemExit(main(sys.argv[1:]))


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python main.py doctor",
        description="Report this machine's Python, torch, GPUs, driver and NCCL, and flag known problems.",
    )
    parser.add_argument(
        "--accelerator",
        "--trainer.accelerator",
        dest="accelerator",
        default="auto",
        choices=("auto", "cpu", "gpu", "cuda", "mps", "tpu"),
        type=str.lower,
        help="the accelerator you plan to train on: checks that it is here (default: auto)",
    )
    return parser.parse_args(list(argv))


def gather(hardware: ModuleType) -> Facts:
    """Ask every question once, through the `hardware` module's query functions."""
    try:
        gpus, cuda_error = hardware.gpus(), None
    except RuntimeError as error:  # e.g. a driver too old for this torch's CUDA: diagnose, don't crash
        gpus, cuda_error = [], str(error).strip().splitlines()[0]
    return Facts(
        python=f"{platform.python_version()} ({sys.executable})",
        torch=hardware.torch_version(),
        torch_cuda=hardware.torch_cuda_build(),
        gpus=gpus,
        cuda_error=cuda_error,
        driver=hardware.nvidia_driver(),
        nccl=hardware.nccl_version(),
        mps=hardware.mps_available(),
        auto_accelerator=hardware.lightning_auto_accelerator(),
        cpu_cores=hardware.cpu_cores(),
        nvidia_smi_problem=hardware.nvidia_smi_problem(),
    )


def report(facts: Facts) -> str:
    build = f"CUDA {facts.torch_cuda} build" if facts.torch_cuda else "CPU-only build"
    lines = [
        ("Python", facts.python),
        ("torch", f"{facts.torch} ({build})"),
        ("CUDA", _cuda_status(facts)),
    ]
    for index, gpu in enumerate(facts.gpus):
        major, minor = gpu.compute_capability
        tensor_cores = ", TF32 tensor cores" if major >= 8 else ""
        lines.append(
            (
                f"  GPU {index}",
                f"{gpu.name}: {gpu.total_memory_gib:.1f} GiB total, {gpu.free_memory_gib:.1f} GiB free, "
                f"compute capability {major}.{minor}{tensor_cores}",
            )
        )
    driver = facts.driver
    if driver is None:
        lines.append(("NVIDIA driver", "not found"))
    else:
        supports = f" (runs CUDA up to {_dotted(driver.max_cuda)})" if driver.max_cuda else ""
        lines.append(("NVIDIA driver", f"{driver.version}{supports}"))
    lines += [
        ("NCCL", facts.nccl or "not available (DDP between GPUs needs it; gloo serves the CPU)"),
        ("Apple MPS", "available" if facts.mps else "not available"),
        ("Lightning", f"{_package_version('lightning')}; accelerator=auto picks {facts.auto_accelerator}"),
        ("CPU cores", str(facts.cpu_cores)),
        ("Project build", f"{TORCH_BUILD}: {pip_install_command(TORCH_BUILD)}"),
        ("  with uv", f"uv sync (or {uv_install_command(TORCH_BUILD)})"),
    ]
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines)


def diagnose(facts: Facts, accelerator: str = "auto") -> list[Problem]:
    """Known problems, each with its fix. `accelerator` is what the user plans to train on."""
    setup = _setup_problem(facts)
    problems = [setup] if setup else []
    if facts.nvidia_smi_problem:
        problems.insert(
            0,
            Problem(
                f"{facts.nvidia_smi_problem}: the NVIDIA driver may be hung, or a GPU lost.",
                "run `nvidia-smi` by hand; if it fails too, reboot the machine or reinstall the driver",
            ),
        )
    accelerator = accelerator.lower()
    if accelerator in ("gpu", "cuda") and not facts.gpus and not (accelerator == "gpu" and facts.mps):
        cause = "fix the problem above" if problems else "no NVIDIA driver was found: install it"
        problems.append(
            Problem(
                f"--accelerator={accelerator} asks for a CUDA GPU, but torch sees none.",
                f"{cause}, or train on the CPU with --trainer.accelerator=cpu",
            )
        )
    if accelerator == "mps" and not facts.mps:
        what = "--accelerator=mps asks for an Apple-silicon GPU, but none is available."
        problems.append(Problem(what, "train on the CPU with --trainer.accelerator=cpu"))
    if accelerator == "tpu" and facts.auto_accelerator != "tpu":
        what = "--accelerator=tpu asks for a TPU, but none is here (it needs torch_xla on a TPU machine)."
        problems.append(Problem(what, "train with --trainer.accelerator=cpu, gpu or auto"))
    return problems


def _setup_problem(facts: Facts) -> Problem | None:
    """What keeps torch from this machine's NVIDIA GPUs, if anything: the most basic cause first."""
    driver = facts.driver
    if driver is None:  # no NVIDIA GPU to miss, unless CUDA itself failed
        if facts.cuda_error:
            return Problem(
                f"torch {facts.torch} cannot start CUDA: {facts.cuda_error}", "install the NVIDIA driver"
            )
        return None
    install = _install(suggested_build(driver.max_cuda))
    torch_cuda = _parse_version(facts.torch_cuda)
    if torch_cuda is None:
        what = f"torch {facts.torch} is a CPU-only build, but NVIDIA driver {driver.version} is installed."
        return Problem(what, install or "update the NVIDIA driver, then install a CUDA build of torch")
    if driver.max_cuda and torch_cuda > driver.max_cuda:
        works = " It runs for now (CUDA minor-version compatibility), but may fail." if facts.gpus else ""
        what = (
            f"torch {facts.torch} is built for CUDA {facts.torch_cuda}, newer than the CUDA "
            f"{_dotted(driver.max_cuda)} that NVIDIA driver {driver.version} runs.{works}"
        )
        fix = "update the NVIDIA driver" + (f", or install a build it runs: {install}" if install else "")
        return Problem(what, fix)
    if facts.cuda_error:
        what = f"torch {facts.torch} cannot start CUDA: {facts.cuda_error}"
        fix = (
            f"check `nvidia-smi`, then reinstall torch: {install}" if install else "update the NVIDIA driver"
        )
        return Problem(what, fix)
    if not facts.gpus:
        what = (
            f"torch {facts.torch} (CUDA {facts.torch_cuda}) and NVIDIA driver {driver.version} are "
            "installed, but torch sees no GPU."
        )
        fix = (
            "check that `nvidia-smi` lists the GPU and that CUDA_VISIBLE_DEVICES does not hide it; "
            "in a container, start it with GPU access (e.g. `docker run --gpus all`)"
        )
        return Problem(what, fix)
    return None


def _install(build: str | None) -> str | None:
    """The commands that replace the installed torch with `build` (pip would keep the old one)."""
    if build is None:
        return None
    return f"pip uninstall -y torch && {pip_install_command(build)} (with uv: {uv_install_command(build)})"


def _cuda_status(facts: Facts) -> str:
    if facts.cuda_error:
        return f"fails to start: {facts.cuda_error}"
    return f"available, {len(facts.gpus)} GPU(s)" if facts.gpus else "not available"


def _parse_version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major), int(minor.partition(".")[0] or 0)


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
