"""What this project adds around the kit: `python main.py doctor` and the presets in configs/.

The doctor and the hardware checks themselves are the kit's, tested in tests/kit.
"""

import os
import subprocess
import sys

import pytest
import yaml

from {{ cookiecutter.package_name }}.kit import torch_build

from conftest import MAIN, PROJECT_ROOT, tensorboard_scalars


def test_main_py_doctor_reports_on_this_machine(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("doctor")
    output = capsys.readouterr().out
    assert exit_info.value.code in (0, 1)  # 1 only where the doctor found a problem to fix
    assert any(line.startswith("NVIDIA driver") for line in output.splitlines()), output
    assert f"https://download.pytorch.org/whl/{torch_build.TORCH_BUILD}" in output


def test_main_py_doctor_runs_where_torch_itself_is_broken(tmp_path):
    """main.py must hand `doctor` over before anything imports torch or Lightning."""
    broken = tmp_path / "torch"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('simulated broken torch install')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PROJECT_ROOT / "src")])}
    command = [sys.executable, str(MAIN), "doctor"]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "torch cannot be imported (simulated broken torch install)" in result.stdout
    assert "Traceback" not in result.stderr


PRESETS = {
    "cpu": {"accelerator": "cpu", "devices": 1, "strategy": "auto"},
    "gpu": {"accelerator": "gpu", "devices": 1, "strategy": "auto"},
    "ddp": {"accelerator": "gpu", "devices": "auto", "strategy": "ddp"},
    "ddp_cpu": {"accelerator": "cpu", "devices": 2, "strategy": "ddp"},
    "bf16": {"precision": "bf16-mixed", "accelerator": "auto"},  # precision only: stacks on a device's
    "fp16": {"precision": "16-mixed", "accelerator": "auto"},
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_say_how_to_use_them_and_stack_on_the_defaults(name, run_main, capsys):
    preset = PROJECT_ROOT / "configs" / "presets" / f"{name}.yaml"
    text = preset.read_text()
    assert text.startswith("# ") and f"-c configs/presets/{name}.yaml" in text
    with pytest.raises(SystemExit):
        run_main("fit", "-c", str(preset), "--print_config")
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert {key: trainer[key] for key in PRESETS[name]} == PRESETS[name]
    assert trainer["default_root_dir"] == "logs", "configs/default.yaml still applies"


@pytest.mark.parametrize("name", ["csv", "mlflow", "wandb"])
def test_logger_presets_say_how_to_use_them_and_keep_tensorboard_first(name, run_main, capsys):
    """The trackers themselves are specified on the kit's fixtures (tests/kit/test_trackers.py)."""
    preset = PROJECT_ROOT / "configs" / "loggers" / f"{name}.yaml"
    assert f"-c configs/loggers/{name}.yaml" in preset.read_text()
    with pytest.raises(SystemExit):
        run_main("fit", "-c", str(preset), "--print_config")
    loggers = yaml.safe_load(capsys.readouterr().out)["trainer"]["logger"]
    names = [logger["class_path"].rsplit(".", 1)[-1] for logger in loggers]
    assert len(names) == 2 and names[0] == "TensorBoardLogger", "checkpoints' run folder stays put"


@pytest.mark.slow
def test_bf16_mixed_precision_trains_on_the_cpu(run_main, tmp_path):
    run_main("fit", "-c", str(PROJECT_ROOT / "configs/presets/bf16.yaml"), "--trainer.max_epochs=2")
    (run,) = (tmp_path / "logs" / "lightning_logs").glob("version_*")
    assert "precision: bf16-mixed" in (run / "config.yaml").read_text()
    scalars = tensorboard_scalars(run)
{%- if cookiecutter.task == "tabular_regression" %}
    assert scalars["val/r2"][-1] > 0.2, scalars["val/r2"]  # predicting the mean scores 0
{%- else %}
    assert scalars["val/acc"][-1] > 0.8, scalars["val/acc"]  # ten classes: chance is 0.1
{%- endif %}
