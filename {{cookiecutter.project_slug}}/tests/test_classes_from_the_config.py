{%- set datamodule, model = ("DiabetesDataModule", "Regressor") if cookiecutter.task == "tabular_regression" else ("DigitsDataModule", "Classifier") -%}
"""Another LightningModule and DataModule chosen from the command line, as Lightning's subclass
mode does (`--model=pkg.MyModule --data=pkg.MyData`), with no code changed; and resumes that
take the run's own classes and data settings from its checkpoint."""

from pathlib import Path

import pytest
import torch
import yaml

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
QUIET = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")
# An autoencoder (no accuracy) on blobs drawn as images, both from the kit's foreign-module suite.
AUTOENCODER = (
    "--model=foreign_modules.AutoEncoder",
    "--model.code=4",
    "--data=foreign_modules.BlobImages",
    "--checkpoint.monitor=val/loss",
)


def only_run(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "logs").glob("*/version_*")
    return run


def saved(checkpoint: Path) -> dict:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)


def test_print_config_names_the_example_classes_as_the_defaults(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--print_config")
    assert exit_info.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["class_path"] == "{{ cookiecutter.package_name }}.model.{{ model }}"
    assert config["data"]["class_path"] == "{{ cookiecutter.package_name }}.data.{{ datamodule }}"


def test_another_module_and_datamodule_train_and_resume_as_the_checkpoint_says(run_main, tmp_path, capsys):
    run_main("fit", *AUTOENCODER, "--trainer.max_epochs=1", *QUIET)
    run = only_run(tmp_path)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"] == {"class_path": "foreign_modules.AutoEncoder", "init_args": {"code": 4}}
    assert config["data"]["class_path"] == "foreign_modules.BlobImages"
    first = saved(run / "checkpoints" / "last.ckpt")
    assert first["hyper_parameters"]["_class_path"] == "foreign_modules.AutoEncoder"

    # No class flag: the checkpoint's module (with code=4) and DataModule, in the same run folder.
    run_main("fit", "--ckpt_path=last", "--trainer.max_epochs=2", "--checkpoint.monitor=val/loss", *QUIET)
    assert only_run(tmp_path) == run
    resumed = saved(run / "checkpoints" / "last.ckpt")
    assert resumed["epoch"] == 1 and resumed["global_step"] == 2 * first["global_step"]
    assert resumed["state_dict"]["encoder.2.weight"].shape == (4, 16)

    # Evaluation rebuilds them too, on the checkpoint's data.
    capsys.readouterr()
    run_main("test", "--ckpt_path=last", *QUIET)
    assert "test/loss" in capsys.readouterr().out


def test_a_module_flag_that_contradicts_the_checkpoint_is_refused(run_main, tmp_path, capsys):
    run_main("fit", *AUTOENCODER, "--trainer.max_epochs=1", *QUIET)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_main("test", "--ckpt_path=last", *AUTOENCODER[:1], "--model.code=3", *QUIET)
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "model.code: 4 in the checkpoint, 3 now" in line


def test_resuming_after_batch_size_auto_takes_the_size_that_was_found(run_main, tmp_path, capfd):
    run_main("fit", "--data.batch_size=auto", "--trainer.max_epochs=1", *QUIET)
    run = only_run(tmp_path)
    # fit ends naming the run, its best checkpoint with the score, and the next command.
    out = capfd.readouterr().out
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    assert (
        f"Run folder: {run.relative_to(tmp_path)}" in out
        and "Next: python main.py test --ckpt_path=best" in out
    )
    assert f"Best checkpoint: {best.relative_to(tmp_path)} (" in out
    found = saved(run / "checkpoints" / "last.ckpt")["datamodule_hyper_parameters"]["batch_size"]
    assert isinstance(found, int)

    # No flag: the resume takes the size found, instead of refusing the config's 64.
    run_main("fit", "--ckpt_path=last", "--trainer.max_epochs=2", *QUIET)
    resumed = saved(run / "checkpoints" / "last.ckpt")
    assert resumed["epoch"] == 1 and resumed["datamodule_hyper_parameters"]["batch_size"] == found

    # Asking for another size is still refused, naming both, even where it is the config's own.
    configured = yaml.safe_load((run / "config.yaml").read_text())  # as tuned, in the run's config
    default = yaml.safe_load(DEFAULT_CONFIG.read_text())["data"]["batch_size"]
    assert configured["data"]["init_args"]["batch_size"] == found
    with pytest.raises(SystemExit) as exit_info:
        run_main("fit", "--ckpt_path=last", "--trainer.max_epochs=3", f"--data.batch_size={default}", *QUIET)
    assert exit_info.value.code == 2
    assert f"data.batch_size: {found} in the checkpoint, {default} now" in capfd.readouterr().err
