"""The torch install the noxfile and the doctor rely on: exact build, never a surprise CUDA wheel."""

import os
import subprocess
import time

import pytest

from {{ cookiecutter.package_name }}.kit import torch_build


@pytest.mark.parametrize("build", torch_build.BUILDS)
def test_the_pin_carries_the_build_label_and_its_index(build, monkeypatch):
    monkeypatch.setattr(torch_build.sys, "platform", "linux")
    assert torch_build.pip_requirement(build, "2.13.0") == [
        f"torch==2.13.0+{build}",
        "--index-url",
        f"https://download.pytorch.org/whl/{build}",
    ]


def test_an_empty_index_leaves_the_source_to_pip_but_keeps_the_label():
    assert torch_build.pip_requirement("cu128", "2.13.0", index="") == ["torch==2.13.0+cu128"]


def test_macos_cpu_wheels_have_no_label(monkeypatch):
    monkeypatch.setattr(torch_build.sys, "platform", "darwin")
    assert torch_build.pip_requirement("cpu", "2.13.0", index="")[0] == "torch==2.13.0"


def test_an_unknown_build_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="cu126"):
        torch_build.pip_requirement("cu999")


def test_gpu_count_comes_from_nvidia_smi(monkeypatch):
    monkeypatch.setattr(torch_build.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    listing = "GPU 0: NVIDIA H200 (UUID: a)\nGPU 1: NVIDIA H200 (UUID: b)\n"
    monkeypatch.setattr(
        torch_build.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, "")
    )
    assert torch_build.nvidia_gpu_count() == 2
    monkeypatch.setattr(torch_build.shutil, "which", lambda name: None)
    assert torch_build.nvidia_gpu_count() == 0


def fake_nvidia_smi(tmp_path, monkeypatch, script: str) -> None:
    """An `nvidia-smi` on PATH that runs `script` (sh)."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


def test_a_hung_or_failing_nvidia_smi_counts_as_no_gpu_within_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_build, "NVIDIA_SMI_TIMEOUT_S", 1)
    fake_nvidia_smi(tmp_path, monkeypatch, "sleep 30")
    started = time.monotonic()
    assert torch_build.nvidia_gpu_count() == 0 and torch_build.driver_cuda() is None
    assert time.monotonic() - started < 10
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 'GPU 0: NVIDIA H200'; exit 9")
    assert torch_build.nvidia_gpu_count() == 0


def test_gpu_sessions_pick_a_build_the_driver_runs(tmp_path, monkeypatch):
    header = "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |"
    fake_nvidia_smi(tmp_path, monkeypatch, f"echo '{header}'")
    assert torch_build.driver_cuda() == (12, 8)
    monkeypatch.setattr(torch_build, "TORCH_BUILD", "cpu")
    assert torch_build.suggested_build((12, 8)) == "cu128"  # the newest it runs
    assert torch_build.suggested_build((12, 6)) == "cu126"
    assert torch_build.suggested_build((11, 8)) is None
    monkeypatch.setattr(torch_build, "TORCH_BUILD", "cu126")
    assert torch_build.suggested_build((13, 0)) == "cu126"  # the project's own, when it runs
