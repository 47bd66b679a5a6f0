"""What hardware torch can use here, and whether `--trainer.accelerator/devices` fits it.

Every question asked of torch or the NVIDIA driver is one small function in the first half of
this file. The doctor and the CLI's checks read the same answers, and tests fake a GPU machine
by replacing those functions (pytest's monkeypatch).
"""

import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .errors import KitError, UsageError
from .torch_build import ask_nvidia_smi

if TYPE_CHECKING:
    from lightning.pytorch.accelerators import Accelerator

GPU_ACCELERATORS = ("gpu", "cuda")


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory_gib: float
    free_memory_gib: float
    compute_capability: tuple[int, int]


@dataclass(frozen=True)
class Driver:
    version: str
    max_cuda: tuple[int, int] | None  # the newest CUDA this driver runs; only nvidia-smi tells


class HardwareError(KitError):
    """The hardware asked for is not here; the message says what was found and what to do."""


# --- Queries: the only functions that ask the machine -------------------------------------


def torch_version() -> str:
    return torch.__version__


def torch_cuda_build() -> str | None:
    """The CUDA version torch was built for ("12.8"); None for a CPU-only build."""
    return torch.version.cuda


def cuda_device_count() -> int:
    """GPUs torch can use. Asks NVML once Lightning is imported, so it is safe before DDP forks."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """Apple-silicon GPU, which Lightning's `gpu` accelerator also means."""
    return torch.backends.mps.is_available()


def gpus() -> list[Gpu]:
    """Name, memory and compute capability of each visible GPU (initialises CUDA: doctor only)."""
    found = []
    for index in range(cuda_device_count()):
        properties = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        capability = (properties.major, properties.minor)
        found.append(Gpu(properties.name, total / 2**30, free / 2**30, capability))
    return found


@functools.lru_cache(maxsize=1)
def _nvidia_smi() -> tuple[str, str | None]:
    """Plain `nvidia-smi` (its header names the driver), asked once per process."""
    return ask_nvidia_smi()


def nvidia_smi_problem() -> str | None:
    """Why nvidia-smi, present on this machine, told nothing: it failed or hung."""
    return _nvidia_smi()[1]


def nvidia_driver() -> Driver | None:
    """The installed NVIDIA driver, from nvidia-smi or else the kernel module; None without one."""
    driver = parse_nvidia_smi(_nvidia_smi()[0])
    if driver is not None:
        return driver
    version_file = Path("/proc/driver/nvidia/version")
    if version_file.is_file():
        version = parse_kernel_module_version(version_file.read_text(errors="replace"))
        if version is not None:
            return Driver(version, max_cuda=None)
    return None


def nccl_version() -> str | None:
    """NCCL, the library DDP uses between NVIDIA GPUs; None when this torch has none."""
    if not (torch.distributed.is_available() and torch.distributed.is_nccl_available()):
        return None
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def cpu_cores() -> int:
    """Cores this process may run on (fewer than the machine has under taskset or a container)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def lightning_auto_accelerator() -> str:
    """What `--trainer.accelerator=auto` picks. Lightning tries TPU, Apple MPS, CUDA, then the CPU."""
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator

    for name, accelerator in (("tpu", XLAAccelerator), ("mps", MPSAccelerator), ("cuda", CUDAAccelerator)):
        if accelerator.is_available():
            return name
    return "cpu"


def parse_nvidia_smi(text: str) -> Driver | None:
    """The driver version and its CUDA version from the header of plain `nvidia-smi` output."""
    version = re.search(r"Driver Version:\s*([\d.]+)", text)
    if version is None:
        return None
    cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    return Driver(version.group(1), (int(cuda.group(1)), int(cuda.group(2))) if cuda else None)


def parse_kernel_module_version(text: str) -> str | None:
    """The version in /proc/driver/nvidia/version ("NVRM version: ... Kernel Module  550.54.14 ...")."""
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None


# --- Checks and settings built on the queries ----------------------------------------------


def why_no_cuda() -> str:
    """One phrase saying why torch sees no CUDA GPU."""
    if torch_cuda_build() is None:
        return f"torch {torch_version()} is a CPU-only build"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else ""
    return f"torch {torch_version()} (built for CUDA {torch_cuda_build()}) finds no GPU{where}"


def check_request(accelerator: Any, devices: Any) -> None:
    """Refuse, in one line, a GPU request this machine cannot meet.

    Lightning would fail too, but only after building the Trainer and with a long traceback
    ("No supported gpu backend found!"). `auto` is checked only where it means CUDA GPUs;
    Accelerator objects and the CPU are left to Lightning, but for the form of `devices`.
    """
    if not isinstance(accelerator, str):
        _check_device_form(devices, on_cpu=False)
        return
    accelerator = accelerator.lower()
    auto_on_cpu = accelerator == "auto" and not mps_available() and cuda_device_count() == 0
    _check_device_form(devices, on_cpu=accelerator == "cpu" or auto_on_cpu)
    if accelerator == "mps" and not mps_available():
        raise HardwareError(
            "--trainer.accelerator=mps needs an Apple-silicon GPU, and none is available here. "
            "Use --trainer.accelerator=cpu (or auto); `python main.py doctor` shows what torch sees."
        )
    if accelerator == "tpu" and importlib.util.find_spec("torch_xla") is None:
        raise HardwareError(
            "--trainer.accelerator=tpu needs torch_xla, which is not installed (TPU machines only). "
            "Use --trainer.accelerator=cpu, gpu or auto."
        )
    if accelerator not in (*GPU_ACCELERATORS, "auto") or (accelerator in ("gpu", "auto") and mps_available()):
        return
    found = cuda_device_count()
    if accelerator == "auto" and found == 0:
        return  # auto trains on the CPU
    if found == 0:
        raise HardwareError(
            f"--trainer.accelerator={accelerator} asks for a CUDA GPU, but {why_no_cuda()}. "
            "Train on the CPU with --trainer.accelerator=cpu (or auto), or run `python main.py doctor` "
            "to find out what is missing."
        )
    _check_device_request(devices, found)


def _check_device_form(devices: Any, on_cpu: bool) -> None:
    """Refuse, in one line, a --trainer.devices Lightning cannot read: it fails deep in the
    Trainer with a traceback (a TypeError for `abc`, or for anything but a count on the CPU)."""
    if isinstance(devices, str) and devices.strip() == "auto":
        return
    if isinstance(devices, str) and re.fullmatch(r"\s*-?\d+\s*", devices):
        devices = int(devices)
    if on_cpu:
        if not (isinstance(devices, int) and not isinstance(devices, bool) and devices > 0):
            raise UsageError(
                f"--trainer.devices={devices!r}: on the CPU, give a number of processes (1, or 2 "
                "for DDP) or auto."
            )
        return
    whole = isinstance(devices, int) and not isinstance(devices, bool)
    indices = isinstance(devices, list | tuple) and all(
        isinstance(index, int) and not isinstance(index, bool) for index in devices
    )
    listed = isinstance(devices, str) and re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*,?\s*", devices)
    if not (whole or indices or listed):
        raise UsageError(
            f"--trainer.devices={devices!r} is not a device count or list: give a count (2), -1 or "
            "auto for all, or device indices ([0, 1] or 0,1)."
        )


def _check_device_request(devices: Any, found: int) -> None:
    """Refuse more GPUs, or GPU indices, than the `found` visible ones."""
    if isinstance(devices, str) and "," in devices:
        devices = [int(index) for index in devices.split(",") if index.strip()]
    elif isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    fix = (
        f"Use --trainer.devices={found} (or auto for all), or check CUDA_VISIBLE_DEVICES; "
        "`python main.py doctor` lists the GPUs torch sees."
    )
    if isinstance(devices, int) and devices > found:
        raise HardwareError(
            f"--trainer.devices={devices} asks for {devices} GPUs, but only {found} are visible. {fix}"
        )
    if isinstance(devices, (list, tuple)):
        missing = [index for index in devices if isinstance(index, int) and index >= found]
        if missing:
            raise HardwareError(
                f"--trainer.devices={list(devices)} names GPU {missing[0]}, but only GPUs 0-{found - 1} "
                f"are visible. {fix}"
            )


def use_tensor_cores(accelerator: "Accelerator") -> None:
    """Let float32 matrix products use TF32 tensor cores when training on a GPU.

    TF32 keeps float32's range with a 10-bit mantissa: several times faster matmuls on GPUs of
    compute capability 8.0 and later (Ampere, Hopper, ...), at a precision training does not
    miss. Older GPUs have no TF32, so there the setting changes nothing; that is why the GPU is
    not asked for its capability here, which would initialise CUDA before DDP starts its
    processes. A precision the user already chose (anything but the default "highest") stays.
    """
    from lightning.pytorch.accelerators import CUDAAccelerator

    if isinstance(accelerator, CUDAAccelerator) and torch.get_float32_matmul_precision() == "highest":
        torch.set_float32_matmul_precision("high")
