"""The doctor (`python main.py doctor`): the report on this machine, and its diagnoses on faked
GPU machines. `tests/test_main.py` checks that main.py hands `doctor` to it.

The GPU branches run here by replacing the query functions in `hardware` (monkeypatch).
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.kit import doctor, hardware, torch_build
from {{ cookiecutter.package_name }}.kit.hardware import Driver, Gpu

from kit_testing import PROJECT_ROOT, run_fixtures_here

H200 = Gpu("NVIDIA H200", total_memory_gib=139.8, free_memory_gib=139.1, compute_capability=(9, 0))
T4 = Gpu("Tesla T4", total_memory_gib=15.0, free_memory_gib=14.6, compute_capability=(7, 5))


def fake_machine(
    monkeypatch: pytest.MonkeyPatch,
    gpus: tuple[Gpu, ...] = (),
    driver: Driver | None = None,
    cuda_build: str | None = None,
    project_build: str = "cpu",
    nvidia_smi_problem: str | None = None,
) -> None:
    answers = {
        "torch_version": f"2.9.0+{'cu' + cuda_build.replace('.', '') if cuda_build else 'cpu'}",
        "torch_cuda_build": cuda_build,
        "gpus": list(gpus),
        "nvidia_driver": driver,
        "nccl_version": "2.26.2" if cuda_build else None,
        "mps_available": False,
        "lightning_auto_accelerator": "cuda" if gpus else "cpu",
        "cpu_cores": 16,
        "nvidia_smi_problem": nvidia_smi_problem,
    }
    for name, answer in answers.items():
        monkeypatch.setattr(hardware, name, lambda answer=answer: answer)
    monkeypatch.setattr(doctor, "TORCH_BUILD", project_build)
    monkeypatch.setattr(torch_build, "TORCH_BUILD", project_build)  # suggested_build reads it there


def run_doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = doctor.main(args)
    return code, capsys.readouterr().out


def test_report_on_this_machine(capsys):
    code, output = run_doctor(capsys)
    assert code in (0, 1)  # 1 only where the doctor found a problem to fix
    for heading in ("Python", "torch", "CUDA", "NVIDIA driver", "NCCL", "Lightning", "CPU cores"):
        assert any(line.startswith(heading) for line in output.splitlines()), f"{heading} missing:\n{output}"
    assert "accelerator=auto picks " in output
    assert (
        f"pip install torch --index-url https://download.pytorch.org/whl/{torch_build.TORCH_BUILD}" in output
    )


def test_the_doctor_runs_where_torch_itself_is_broken(tmp_path):
    """The doctor must not import torch or Lightning before it has checked them."""
    broken = tmp_path / "torch"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('simulated broken torch install')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PROJECT_ROOT / "src")])}
    result = subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}.kit.doctor"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "torch cannot be imported (simulated broken torch install)" in result.stdout
    assert "pip install torch" in result.stdout and "Traceback" not in result.stderr


def test_help_points_to_the_doctor(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        run_fixtures_here(monkeypatch, "--help")
    assert "python main.py doctor" in " ".join(capsys.readouterr().out.split())  # however it wraps


def test_healthy_gpu_machine_lists_each_gpu_and_finds_no_problem(monkeypatch, capsys):
    fake_machine(monkeypatch, gpus=(H200, T4), driver=Driver("570.86.15", (12, 8)), cuda_build="12.8")
    code, output = run_doctor(capsys)
    assert code == 0, output
    assert "2.9.0+cu128 (CUDA 12.8 build)" in output and "available, 2 GPU(s)" in output
    assert "NVIDIA H200: 139.8 GiB total, 139.1 GiB free, compute capability 9.0, TF32 tensor cores" in output
    assert "Tesla T4: 15.0 GiB total, 14.6 GiB free, compute capability 7.5\n" in output
    assert "570.86.15 (runs CUDA up to 12.8)" in output and "2.26.2" in output
    assert "accelerator=auto picks cuda" in output
    assert "No problems found." in output


def test_cpu_only_torch_on_a_machine_with_an_nvidia_driver_says_which_build_to_install(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("570.86.15", (12, 8)))
    code, output = run_doctor(capsys)
    assert code == 1
    assert "PROBLEM: torch 2.9.0+cpu is a CPU-only build, but NVIDIA driver 570.86.15 is installed." in output
    # The newest build the driver runs; the old torch goes first, or pip would keep it.
    assert (
        "pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128"
        in output
    )


def test_the_projects_own_cuda_build_is_preferred_when_the_driver_runs_it(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("580.65.06", (13, 0)), project_build="cu126")
    _, output = run_doctor(capsys)
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu126" in output


def test_torch_built_for_a_newer_cuda_than_the_driver_runs(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("570.86.15", (12, 8)), cuda_build="13.0", project_build="cu130")
    code, output = run_doctor(capsys)
    assert code == 1
    assert "built for CUDA 13.0, newer than the CUDA 12.8 that NVIDIA driver 570.86.15 runs" in output
    assert "update the NVIDIA driver, or install a build it runs: pip uninstall -y torch && " in output
    assert "https://download.pytorch.org/whl/cu128" in output


def test_a_driver_too_old_for_every_build_needs_an_update(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("535.104.05", (12, 2)), cuda_build="12.6", project_build="cu126")
    _, output = run_doctor(capsys)
    assert "Fix: update the NVIDIA driver\n" in output


def test_cuda_torch_and_driver_without_a_visible_gpu(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("570.86.15", (12, 8)), cuda_build="12.8")
    code, output = run_doctor(capsys)
    assert code == 1
    assert "but torch sees no GPU" in output and "CUDA_VISIBLE_DEVICES" in output


def test_a_gpu_that_fails_to_start_is_diagnosed_not_a_crash(monkeypatch, capsys):
    fake_machine(monkeypatch, driver=Driver("550.54.14", None), cuda_build="12.8", project_build="cu128")

    def cuda_fails() -> list[Gpu]:
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 12040).\nMore text")

    monkeypatch.setattr(hardware, "gpus", cuda_fails)
    code, output = run_doctor(capsys)
    assert code == 1
    assert "fails to start: The NVIDIA driver on your system is too old (found version 12040)." in output
    assert "cannot start CUDA" in output and "nvidia-smi" in output and "whl/cu128" in output


@pytest.mark.parametrize("flag", [("--accelerator", "gpu"), ("--trainer.accelerator=cuda",)])
def test_asking_for_a_gpu_on_a_machine_without_one(monkeypatch, capsys, flag):
    fake_machine(monkeypatch)
    code, output = run_doctor(capsys, *flag)
    assert code == 1
    assert "asks for a CUDA GPU, but torch sees none" in output
    assert "no NVIDIA driver was found" in output and "--trainer.accelerator=cpu" in output


def test_without_an_accelerator_hint_a_cpu_machine_is_healthy(monkeypatch, capsys):
    fake_machine(monkeypatch)
    code, output = run_doctor(capsys)
    assert code == 0 and "NVIDIA driver  not found" in output and "No problems found." in output


def test_a_missing_torch_is_reported_with_the_install_command(monkeypatch, capsys):
    package = sys.modules[doctor.__package__]
    monkeypatch.delattr(package, "hardware")
    monkeypatch.setitem(sys.modules, f"{doctor.__package__}.hardware", None)  # importing it now fails
    code, output = run_doctor(capsys)
    assert code == 1
    assert "torch cannot be imported" in output and torch_build.pip_install_command() in output


@pytest.mark.parametrize("build", torch_build.BUILDS)
def test_each_build_has_its_index_url_and_install_command(build):
    assert torch_build.index_url(build) == f"https://download.pytorch.org/whl/{build}"
    assert (
        torch_build.pip_install_command(build)
        == f"pip install torch --index-url {torch_build.index_url(build)}"
    )


def test_build_cuda_versions_and_unknown_builds():
    assert torch_build.cuda_version("cu128") == (12, 8) and torch_build.cuda_version("cu130") == (13, 0)
    assert torch_build.cuda_version("cpu") is None
    with pytest.raises(ValueError, match="choose one of cpu, cu126, cu128, cu130"):
        torch_build.index_url("cu999")


def test_torch_build_module_needs_only_the_standard_library():
    """The noxfile loads it by path before anything is installed."""
    tree = ast.parse(Path(torch_build.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert all(name and name.split(".")[0] in sys.stdlib_module_names for name in imported), imported


def test_an_nvidia_smi_that_hangs_is_named_as_the_first_problem(monkeypatch, capsys):
    problem = "nvidia-smi did not answer within 10 s"
    fake_machine(monkeypatch, driver=None, nvidia_smi_problem=problem)
    assert doctor.main([]) == 1
    output = capsys.readouterr().out
    assert f"PROBLEM: {problem}: the NVIDIA driver may be hung" in output and "reboot" in output


@pytest.mark.parametrize("accelerator", ["banana", "TPU"])
def test_the_doctor_refuses_an_unknown_accelerator_and_checks_tpu(monkeypatch, capsys, accelerator):
    fake_machine(monkeypatch)
    if accelerator == "banana":
        with pytest.raises(SystemExit) as stop:
            doctor.main(["--accelerator=banana"])
        assert stop.value.code == 2 and "invalid choice: 'banana'" in capsys.readouterr().err
    else:
        assert doctor.main([f"--accelerator={accelerator}"]) == 1
        assert "asks for a TPU, but none is here" in capsys.readouterr().out
