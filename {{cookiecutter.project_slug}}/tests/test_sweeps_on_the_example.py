"""`python main.py sweep` on the digits: trials, pruning of hopeless ones, a reproducible best
config, DDP trials. (Bad search spaces, and the rest of the sweep, are the kit's: tests/kit.)"""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import MAIN, extra

optuna = extra("optuna", "sweep")

SHORT = ("--trainer.max_epochs=3", "--lr_scheduler=null", "--trainer.enable_progress_bar=false")
# A learning rate of 1e-7 learns nothing in 3 epochs: those trials are hopeless.
SPACE = {
    "metric": "val/acc",
    "direction": "maximize",
    "seed": 0,
    "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
    "params": {
        "optimizer.init_args.lr": {"type": "categorical", "choices": [1.0e-7, 3.0e-3]},
        "model.network.init_args.width": {"type": "int", "low": 8, "high": 16, "step": 8},
    },
}


def sweep(folder: Path, *args: str, space: dict = SPACE) -> subprocess.CompletedProcess[str]:
    (folder / "space.yaml").write_text(yaml.safe_dump(space))
    command = [sys.executable, str(MAIN), "sweep", "--space=space.yaml", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=900)


def study(folder: Path) -> optuna.Study:
    journal = optuna.storages.journal.JournalFileBackend(
        str(folder / "logs" / "sweeps" / "sweep" / "journal.log")
    )
    return optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(journal))


@pytest.mark.slow
def test_a_sweep_on_the_example_prunes_hopeless_trials_and_its_best_config_reruns(tmp_path):
    result = sweep(tmp_path, "--n_trials=4", *SHORT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    trials = study(tmp_path).get_trials()
    states = [t.state.name for t in trials]
    assert len(trials) == 4 and "PRUNED" in states and "COMPLETE" in states, states
    assert all(t.params["optimizer.init_args.lr"] == 1.0e-7 for t in trials if t.state.name == "PRUNED")

    best = study(tmp_path).best_trial
    config = yaml.safe_load((tmp_path / "logs" / "sweeps" / "sweep" / "best.yaml").read_text())
    assert config["optimizer"]["init_args"]["lr"] == best.params["optimizer.init_args.lr"]
    assert (
        config["model"]["init_args"]["network"]["init_args"]["width"]
        == best.params["model.network.init_args.width"]
    )
    assert config["trainer"]["default_root_dir"] == "logs" and config["ckpt_path"] is None


@pytest.mark.slow
def test_trials_run_with_ddp_and_are_pruned_on_every_rank(tmp_path):
    space = {**SPACE, "pruner": {"type": "threshold", "lower": 1.01, "n_warmup_steps": 1}}
    ddp = ("-c", str(MAIN.parent / "configs" / "presets" / "ddp_cpu.yaml"))
    result = sweep(tmp_path, "--n_trials=2", *ddp, "--trainer.max_epochs=20", space=space)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert [t.state.name for t in study(tmp_path).get_trials()] == ["PRUNED", "PRUNED"]
    for log in (tmp_path / "logs" / "sweeps" / "sweep").glob("trial_*/output.log"):
        text = log.read_text()
        assert "Starting with 2 processes" in text or "distributed_backend=gloo" in text
        assert "every rank stops after this step" in text  # both ranks, at one step
