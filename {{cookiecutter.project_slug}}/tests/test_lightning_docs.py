"""Lightning's documented command lines on the example itself, as a user pastes them into `main.py`.

The kit's CLI is held to every one of them in `tests/kit/test_documented_command_lines.py`; here the
example's own defaults (configs/default.yaml) and one real training run through `main.py`.
"""

from pathlib import Path

import pytest
import torch
import yaml

from {{ cookiecutter.package_name }}.cli import cli_main

# One short epoch: 2 training batches, then 1 validation batch.
SHORT = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
)


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_optimizer_flags_build_that_optimizer(run_main, tmp_path):
    run_main("fit", *SHORT, "--optimizer=SGD", "--optimizer.lr=0.05")
    group = last_checkpoint(tmp_path)["optimizer_states"][0]["param_groups"][0]
    assert group["initial_lr"] == 0.05 and "momentum" in group and "betas" not in group


def test_calling_the_cli_from_python_reads_the_same_defaults_as_main_py(run_main, capsys):
    with pytest.raises(SystemExit):
        run_main("fit", "--print_config")
    from_main = yaml.safe_load(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        cli_main(["fit", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out) == from_main
    assert from_main["optimizer"]["init_args"]["lr"] == 0.002  # configs/default.yaml, not class defaults
