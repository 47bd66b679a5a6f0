"""The kit's CLI on its fixtures: the callbacks each run gets, all of them shown by
`--print_config`, and a quick run that writes no checkpoint."""

import sys
from typing import Any

import pytest
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.profilers import SimpleProfiler

from {{ cookiecutter.package_name }}.kit.profiling import NoProfiler

from kit_fixtures import FixtureCLI
from kit_testing import run_fixtures_here


def test_fast_dev_run_trains_one_batch_and_writes_no_checkpoint(monkeypatch, tmp_path):
    run_fixtures_here(
        monkeypatch, "fit", "--trainer.fast_dev_run=true", f"--trainer.default_root_dir={tmp_path}"
    )
    assert not list(tmp_path.rglob("*.ckpt")), "fast_dev_run must not write checkpoints"


class BuildOnlyCLI(FixtureCLI):
    """Builds everything a subcommand would use, then returns instead of running it."""

    def fit(self, **kwargs: Any) -> None:
        pass

    validate = test = predict = fit


GUARD = {"FitGuard"}
CHECKPOINTS = {"BestCheckpoint", "LastCheckpoint"}
FIT_ONLY = GUARD | CHECKPOINTS | {"BatchSizeTuner"}
OWN_WRITER = "--trainer.callbacks+=lightning.pytorch.callbacks.BasePredictionWriter"


@pytest.mark.parametrize(
    ("args", "present", "absent"),
    [
        (["fit"], GUARD | CHECKPOINTS | {"TQDMProgressBar"}, {"BatchSizeTuner", "PredictionWriter"}),
        (["fit", "--data.batch_size=auto"], {"BatchSizeTuner"}, set()),
        (["fit", "--data.batch_size=32", "--tuner.scale_lr=linear"], {"BatchSizeTuner"}, set()),
        (["fit", "--trainer.enable_checkpointing=false"], GUARD, CHECKPOINTS),
        (["fit", "--trainer.enable_progress_bar=false"], GUARD, {"TQDMProgressBar"}),
        # trainer.callbacks is the user's list: emptying it drops none of the kit's guarantees
        (["fit", "--trainer.callbacks=[]"], GUARD | CHECKPOINTS, set()),
        (["predict"], {"PredictionWriter"}, FIT_ONLY),
        (["predict", OWN_WRITER], {"BasePredictionWriter"}, {"PredictionWriter"}),
        (["test"], set(), FIT_ONLY | {"PredictionWriter"}),
    ],
)
def test_each_run_gets_the_callbacks_its_config_and_flags_ask_for(
    tmp_path, monkeypatch, args, present, absent
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kit_fixtures"])
    cli = BuildOnlyCLI(args=args)
    names = {type(callback).__name__ for callback in cli.trainer.callbacks}
    assert present <= names, f"missing {present - names}"
    assert not absent & names, f"unexpected {absent & names}"


# Where --print_config shows a callback that is configured as a group rather than listed.
SHOWN_AS = {
    "FitGuard": "guard:",
    "BestCheckpoint": "checkpoint:",
    "LastCheckpoint": "last_checkpoint:",
    "BatchSizeTuner": "tuner:",
    "TQDMProgressBar": "progress_bar:",
    "ModelSummary": "enable_model_summary:",  # Lightning's own, behind its Trainer flag
    "RichModelSummary": "enable_model_summary:",  # the same, when rich is installed
    "ModelCheckpoint": "enable_checkpointing:",  # Lightning's default outside fit, idle there
}


@pytest.mark.parametrize("args", [["fit", "--data.batch_size=auto"], ["predict"]])
def test_every_callback_of_a_run_shows_in_print_config(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kit_fixtures"])
    cli = BuildOnlyCLI(args=args)
    with pytest.raises(SystemExit):
        BuildOnlyCLI(args=[*args, "--print_config"])
    printed = capsys.readouterr().out
    for callback in cli.trainer.callbacks:
        name = type(callback).__name__
        if isinstance(callback, SaveConfigCallback):  # LightningCLI's: writes this config to the run
            continue
        if name == "PredictionWriter":  # predict's, without settings; a writer listed replaces it
            continue
        shown = SHOWN_AS.get(name, f"{type(callback).__module__}.{name}")
        assert shown in printed, f"{name} runs but --print_config does not show it"


@pytest.mark.parametrize(
    ("flags", "profiler"), [([], NoProfiler), (["--trainer.profiler=simple"], SimpleProfiler)]
)
def test_the_profiler_asked_for_is_the_one_used(tmp_path, monkeypatch, flags, profiler):
    """No profiler asked for: the kit's NoProfiler (Lightning's default without its cost per hook
    call); one asked for, as Lightning documents it, is used as such."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kit_fixtures"])
    cli = BuildOnlyCLI(args=["fit", *flags])
    assert type(cli.trainer.profiler) is profiler
    with cli.trainer.profiler.profile("an action"):  # profiles (or not) without complaint
        pass
