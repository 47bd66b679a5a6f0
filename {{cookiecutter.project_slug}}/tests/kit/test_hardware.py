"""Hardware requests: refused in one clear line when the machine cannot meet them.

GPU machines are faked by replacing the query functions in `hardware` (monkeypatch), so every
branch runs here, on a CPU.
"""

import re

import pytest
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator

from {{ cookiecutter.package_name }}.kit import hardware
from {{ cookiecutter.package_name }}.kit.errors import UsageError
from {{ cookiecutter.package_name }}.kit.hardware import HardwareError, check_request

from kit_testing import run_fixtures_here


def fake_machine(
    monkeypatch: pytest.MonkeyPatch, cuda_gpus: int = 0, cuda_build: str | None = None, mps=False
):
    monkeypatch.setattr(hardware, "cuda_device_count", lambda: cuda_gpus)
    monkeypatch.setattr(hardware, "torch_cuda_build", lambda: cuda_build)
    monkeypatch.setattr(hardware, "torch_version", lambda: "2.9.0+cu128" if cuda_build else "2.9.0+cpu")
    monkeypatch.setattr(hardware, "mps_available", lambda: mps)


@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_gpu_request_on_a_cpu_only_torch_stops_with_one_line_saying_what_to_do(
    accelerator, tmp_path, monkeypatch, capsys
):
    fake_machine(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_fixtures_here(monkeypatch, "fit", f"--trainer.accelerator={accelerator}")
    assert exit_info.value.code == 2  # the kit's `run` caught it: no traceback
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: ")
    assert f"--trainer.accelerator={accelerator} asks for a CUDA GPU" in error
    assert "torch 2.9.0+cpu is a CPU-only build" in error
    assert "--trainer.accelerator=cpu" in error and "python main.py doctor" in error


def test_cuda_build_that_sees_no_gpu_says_so_and_shows_cuda_visible_devices(monkeypatch):
    fake_machine(monkeypatch, cuda_build="12.8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(
        HardwareError, match=r"built for CUDA 12.8\) finds no GPU \(CUDA_VISIBLE_DEVICES=''\)"
    ):
        check_request("gpu", 1)


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (4, "--trainer.devices=4 asks for 4 GPUs, but only 2 are visible"),
        ("3", "--trainer.devices=3 asks for 3 GPUs, but only 2 are visible"),
        ([0, 2], "--trainer.devices=[0, 2] names GPU 2, but only GPUs 0-1 are visible"),
        ("1,2", "--trainer.devices=[1, 2] names GPU 2"),
    ],
)
@pytest.mark.parametrize("accelerator", ["gpu", "auto"])  # auto picks the GPUs when there are some
def test_more_gpus_than_visible_are_refused_with_the_count_to_use(monkeypatch, accelerator, devices, message):
    fake_machine(monkeypatch, cuda_gpus=2, cuda_build="12.8")
    with pytest.raises(HardwareError, match=re.escape("Use --trainer.devices=2")) as error:
        check_request(accelerator, devices)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("gpus", "accelerator", "devices"),
    [
        (2, "gpu", 2),
        (2, "cuda", [0, 1]),
        (2, "gpu", "auto"),
        (2, "GPU", -1),
        (0, "cpu", 8),  # CPU "devices" are processes: any number works
        (0, "auto", 4),  # auto falls back to the CPU
    ],
)
def test_requests_the_machine_can_meet_pass(monkeypatch, gpus, accelerator, devices):
    fake_machine(monkeypatch, cuda_gpus=gpus, cuda_build="12.8" if gpus else None)
    check_request(accelerator, devices)


def test_gpu_means_apple_mps_where_there_is_one_and_mps_is_refused_elsewhere(monkeypatch):
    fake_machine(monkeypatch, mps=True)
    check_request("gpu", 1)
    fake_machine(monkeypatch, mps=False)
    with pytest.raises(HardwareError, match=re.escape("--trainer.accelerator=mps needs an Apple")):
        check_request("mps", 1)


@pytest.fixture
def matmul_precision():
    """Restores torch's process-wide matmul precision after the test."""
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.usefixtures("matmul_precision")
def test_tensor_cores_are_enabled_for_gpu_training_only():
    torch.set_float32_matmul_precision("highest")
    hardware.use_tensor_cores(CPUAccelerator())
    assert torch.get_float32_matmul_precision() == "highest"
    hardware.use_tensor_cores(CUDAAccelerator())  # only Lightning's accelerator object: no GPU needed
    assert torch.get_float32_matmul_precision() == "high"


@pytest.mark.usefixtures("matmul_precision")
def test_a_matmul_precision_the_user_chose_is_kept():
    torch.set_float32_matmul_precision("medium")
    hardware.use_tensor_cores(CUDAAccelerator())
    assert torch.get_float32_matmul_precision() == "medium"


NVIDIA_SMI_HEADER = """
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.14              Driver Version: 550.54.14      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_driver_version_and_its_cuda_are_read_from_nvidia_smi():
    assert hardware.parse_nvidia_smi(NVIDIA_SMI_HEADER) == hardware.Driver("550.54.14", (12, 4))
    assert hardware.parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate") is None


@pytest.mark.parametrize(
    "text",
    [
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder)\n",
    ],
)
def test_driver_version_is_read_from_the_kernel_module_without_nvidia_smi(text):
    assert hardware.parse_kernel_module_version(text) == "550.54.14"


@pytest.mark.parametrize("devices", ["abc", "two", "0,x", 1.5, True, [0, "1"]])
@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_request_lightning_cannot_read_is_refused_in_one_line(monkeypatch, accelerator, devices):
    fake_machine(monkeypatch, cuda_gpus=2, cuda_build="12.8")
    with pytest.raises(UsageError, match=r"is not a device count or list: give a count \(2\), -1 or auto"):
        check_request(accelerator, devices)


@pytest.mark.parametrize("devices", ["abc", 0, -1, "-1", [0, 1], "0,1", 1.5])
@pytest.mark.parametrize("accelerator", ["cpu", "auto"])  # auto is the CPU on a machine without GPUs
def test_a_cpu_request_for_anything_but_a_count_is_refused_in_one_line(monkeypatch, accelerator, devices):
    fake_machine(monkeypatch, cuda_gpus=0)
    with pytest.raises(UsageError, match=r"on the CPU, give a number of processes \(1, or 2 for DDP\)"):
        check_request(accelerator, devices)


@pytest.mark.parametrize(
    ("accelerator", "devices"),
    [
        *[("gpu", devices) for devices in (1, -1, "auto", "2", " 1 ", "-1", "0,1", "1,", [0, 1], (1,))],
        *[("cpu", devices) for devices in (1, 2, "auto", "2", " 1 ")],
    ],
)
def test_every_device_request_lightning_reads_passes(monkeypatch, accelerator, devices):
    fake_machine(monkeypatch, cuda_gpus=2, cuda_build="12.8")
    check_request(accelerator, devices)
