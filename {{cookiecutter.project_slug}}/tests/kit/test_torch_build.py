"""The torch install the noxfile and the doctor rely on: exact build, never a surprise CUDA wheel."""

import subprocess

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
