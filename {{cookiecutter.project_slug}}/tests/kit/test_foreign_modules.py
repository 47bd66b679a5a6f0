"""The README's "Bring your own LightningModule" contract, on modules shaped unlike the kit's
fixtures (`foreign_modules.py`): under the project's default config, every default callback on,
each command either works or is refused in one line with exit code 2, writing nothing.

`OUTCOMES` is the contract as a table: for each module and command, None (it works) or the
words its one-line refusal must hold.
"""

import csv
import functools
import json
from pathlib import Path

import pytest
import torch
import yaml

from {{ cookiecutter.package_name }}.kit.cli import EXIT_STOPPED

from foreign_modules import FOREIGN, default_config_for_any_module
from kit_fixtures import FixtureCLI, run
from kit_testing import QUICK, extra, last_checkpoint, run_fixtures

OUTCOMES: dict[str, dict[str, str | None]] = {
    "gan": {
        "test": "No `test_step()` method defined",  # Lightning's own refusal
        "predict": None,
        "export": None,  # from example_input_array: forward takes latent noise
        "batch_size=auto": "GAN optimizes manually",
        "--optimizer": "drop --optimizer and --lr_scheduler",
    },
    "autoencoder": {
        "test": None,
        "predict": "predict needs AutoEncoder.predict_step",
        "export": "Set example_input_array in AutoEncoder.__init__",
        "batch_size=auto": None,
        "--optimizer": None,
    },
    "text": {
        "test": None,
        "predict": None,
        "export": "returns a SequenceClassifierOutput, not a tensor",
        "batch_size=auto": None,
        "--optimizer": None,
    },
    "step_scheduled": {
        "test": None,
        "predict": None,
        "export": None,
        "batch_size=auto": None,
        "--optimizer": None,  # replaces its own, as Lightning documents
    },
}
# The console line saying which optimizers fit uses.
OWN_OPTIMIZERS = {"gan", "step_scheduled"}
# A short fit: 15 batches an epoch (240 samples, 16 a batch); the last epoch draws the pictures
# (or says why it cannot). The GAN's two optimizers each count a step per batch.
FIT = ("fit", "--trainer.max_epochs=2")
BATCHES = 30
STOP_AT = 20  # SIGTERM after this optimizer step, mid-epoch


@pytest.fixture(scope="module")
def defaults(tmp_path_factory) -> Path:
    return default_config_for_any_module(tmp_path_factory.mktemp("defaults"))


def run_here(capfd, defaults: Path, folder: Path, name: str, *args: str) -> tuple[int, str, str]:
    """`python -m kit_fixtures --fixture=NAME ARGS` under the default config, in this process
    (quicker than a new one); its exit code, stdout and stderr."""
    capfd.readouterr()
    try:
        run(
            functools.partial(FixtureCLI, name),
            [*args, f"--trainer.default_root_dir={folder}", *QUICK],
            [defaults],
        )
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    out, err = capfd.readouterr()
    return code, out, err


def written(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def assert_refused(outcome: tuple[int, str, str], words: str, before: set[Path], folder: Path) -> None:
    code, _, err = outcome
    assert code == 2, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], err[-2000:]
    assert "Traceback" not in err
    assert written(folder) == before, "a refusal writes nothing"


@pytest.fixture(scope="module", params=sorted(OUTCOMES))
def trained(request, tmp_path_factory, defaults):
    """A module's uninterrupted short fit, as a user runs it: its name, folder, last checkpoint
    and console output."""
    name = request.param
    if name == "text":
        extra("transformers", "hf")
    folder = tmp_path_factory.mktemp(name)
    result = run_fixtures(folder, f"--fixture={name}", *FIT, env={"KIT_FIXTURES_DEFAULTS": str(defaults)})
    assert result.returncode == 0, result.stderr[-3000:]
    return name, folder, last_checkpoint(folder), result.stdout + result.stderr


@pytest.mark.slow
def test_fit_trains_with_the_modules_own_optimizers_or_the_configs(trained):
    name, _, checkpoint, console = trained
    assert checkpoint["global_step"] == BATCHES * (2 if name == "gan" else 1)
    if name in OWN_OPTIMIZERS:
        assert f"Optimizer: {FOREIGN[name][0].__name__}.configure_optimizers (the module's own" in console
    else:
        assert "Optimizer: AdamW(lr=0.002); LR scheduler: CosineAnnealingLR" in console
    if name == "gan":
        assert len(checkpoint["optimizer_states"]) == 2
    if name == "step_scheduled":  # OneCycleLR, stepped every batch as its own dict says
        assert checkpoint["lr_schedulers"][0]["last_epoch"] == BATCHES
    assert "will be overridden" not in console


@pytest.mark.slow
def test_pictures_are_drawn_where_they_fit_and_else_skipped_with_one_line(trained):
    name, _, _, console = trained
    notices = [line for line in console.splitlines() if "ValidationImages draws no pictures" in line]
    if name == "step_scheduled":  # (images, labels) and one score per class: it fits
        assert notices == []
    else:
        assert len(notices) == 1, console[-3000:]


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_same_weights(trained, tmp_path, defaults, capfd):
    name, _, uninterrupted, _ = trained
    signal_at = ("--trainer.callbacks+=faults.SignalAt", f"--trainer.callbacks.step={STOP_AT}")
    code, _, err = run_here(capfd, defaults, tmp_path, name, *FIT, *signal_at)
    assert code == EXIT_STOPPED, err[-3000:]
    code, _, err = run_here(capfd, defaults, tmp_path, name, *FIT, "--ckpt_path=last")
    assert code == 0, err[-3000:]
    resumed = last_checkpoint(tmp_path)
    assert resumed["global_step"] == uninterrupted["global_step"]
    for key, tensor in uninterrupted["state_dict"].items():
        assert torch.equal(tensor, resumed["state_dict"][key]), f"{name}: {key} differs after resuming"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["test", "predict", "export"])
def test_evaluation_and_export_work_or_are_refused_in_one_line(trained, command, defaults, capfd):
    name, folder, _, _ = trained
    before = written(folder)
    outcome = run_here(capfd, defaults, folder, name, command, "--ckpt_path=last")
    refusal = OUTCOMES[name][command]
    if refusal is not None:
        assert_refused(outcome, refusal, before, folder)
        return
    code, _, err = outcome
    assert code == 0, err[-3000:]
    if command == "predict":
        (path,) = (path for path in written(folder) - before if path.name == "predictions.csv")
        with path.open(newline="") as file:
            rows = list(csv.reader(file))
        assert rows[0][0] == "index" and len(rows) == 1 + 60, "a header, and a row per test sample"
    if command == "export":
        (exported,) = (path for path in written(folder) - before if path.suffix == ".onnx")
        metadata = json.loads(exported.with_name(exported.name + ".json").read_text())
        assert metadata["parity"]["max_abs_error"] <= metadata["parity"]["tolerance"]
        if name == "gan":  # the declared latent noise, not a validation image
            assert metadata["inputs"][0]["shape"] == [None, 8]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [("--data.batch_size=auto",), ("--optimizer=SGD", "--optimizer.lr=0.05")])
def test_tuning_and_other_optimizers_work_or_are_refused_up_front(trained, flags, tmp_path, defaults, capfd):
    name = trained[0]
    command = "batch_size=auto" if "auto" in flags[0] else "--optimizer"
    outcome = run_here(capfd, defaults, tmp_path, name, "fit", "--trainer.max_epochs=1", *flags)
    refusal = OUTCOMES[name][command]
    if refusal is not None:
        assert_refused(outcome, refusal, set(), tmp_path)
        return
    code, _, err = outcome
    assert code == 0, err[-3000:]
    (config,) = tmp_path.rglob("config.yaml")
    if command == "batch_size=auto":
        assert isinstance(yaml.safe_load(config.read_text())["data"]["batch_size"], int), "the tuned size"
    else:  # SGD as asked, with the config's scheduler, in place of any optimizer of the module's
        (group,) = last_checkpoint(tmp_path)["optimizer_states"][0]["param_groups"]
        assert group["initial_lr"] == 0.05 and "momentum" in group
