"""`sweep` on the fixtures: trials are real `fit` runs; pruning, resuming the study, parallel
workers and a reproducible best config, read back through Optuna's own storage."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from kit_testing import PROJECT_ROOT, extra, finish, free_port, start_fixtures, tensorboard_settings

optuna = extra("optuna", "sweep")

FIT = ("--trainer.max_epochs=2", "--trainer.limit_val_batches=2")
SPACE = {
    "metric": "val/acc",
    "direction": "maximize",
    "seed": 0,
    "pruner": "none",
    "params": {
        "optimizer.init_args.lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
        "model.hidden": {"type": "int", "low": 8, "high": 32, "step": 8},
    },
}


def sweep(workdir, *args, space=SPACE, timeout=600):
    (workdir / "space.yaml").write_text(yaml.safe_dump(space))
    optimizer = (
        "--optimizer=Adam",
        "--optimizer.lr=0.01",
    )  # the fixtures' model has no optimizer flag of its own
    result = finish(start_fixtures(workdir, "sweep", "--space=space.yaml", *optimizer, *args), timeout)
    return result


def trials(workdir):
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(workdir / "sweeps" / "sweep" / "journal.log"))
    )
    return optuna.load_study(study_name="sweep", storage=storage).get_trials()


@pytest.mark.slow
def test_a_sweep_runs_its_trials_and_its_best_config_trains_the_best_trial_again(tmp_path):
    result = sweep(tmp_path, "--n_trials=2", *FIT)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    done = trials(tmp_path)
    assert [t.state.name for t in done] == ["COMPLETE"] * 2
    assert len({t.params["optimizer.init_args.lr"] for t in done}) == 2, "each trial its own settings"
    assert "trial  state" in result.stdout and "best.yaml" in result.stdout
    assert "Importance of each setting (sums to 1): " in result.stdout
    for trial in done:  # each trial is a run of its own, with TensorBoard and checkpoints
        (run,) = (tmp_path / "sweeps" / "sweep" / f"trial_{trial.number:03d}").glob("*/version_0")
        assert list(run.glob("events.out.tfevents.*")) and (run / "checkpoints" / "last.ckpt").is_file()
        logged = tensorboard_settings(run)  # what TensorBoard's HParams tab shows: the sampled settings too
        assert logged["optimizer.lr"] == pytest.approx(trial.params["optimizer.init_args.lr"])
        assert logged["model.hidden"] == trial.params["model.hidden"] and "data.batch_size" in logged

    best = max(done, key=lambda t: t.value)
    again = tmp_path / "again"
    again.mkdir()
    best_yaml = tmp_path / "sweeps" / "sweep" / "best.yaml"
    rerun = finish(start_fixtures(again, "fit", "-c", str(best_yaml)), 300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    (last,) = again.rglob("last.ckpt")
    scores = [
        v["best_model_score"]
        for k, v in torch.load(last, weights_only=False)["callbacks"].items()
        if k.startswith("BestCheckpoint")
    ]
    assert float(scores[0]) == pytest.approx(best.value)

    # Rerunning the command continues the study: one more trial, not two new ones, and with
    # settings of its own (the sampler's seed moves on with the study: no repeat of trial 0).
    more = sweep(tmp_path, "--n_trials=3", *FIT)
    assert more.returncode == 0 and len(trials(tmp_path)) == 3
    first, _, added = (t.params for t in trials(tmp_path))
    assert added != first, "the re-run sweep suggested trial 0's settings again"


@pytest.mark.slow
def test_unpromising_trials_are_pruned_early_not_failed(tmp_path):
    space = {**SPACE, "pruner": {"type": "threshold", "lower": 1.01}}  # no accuracy reaches it
    result = sweep(tmp_path, "--n_trials=2", "--trainer.max_epochs=200", space=space)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert [t.state.name for t in trials(tmp_path)] == ["PRUNED"] * 2
    # Stopped as a preempted run is (SIGTERM, a clean save), long before epoch 200. The fixtures'
    # epochs take a fraction of the sweep's polling interval, so a few more may pass first.
    logs = sorted(tmp_path.glob("sweeps/sweep/trial_*/output.log"))
    assert len(logs) == 2 and all("Stopped before the end (exit code 143)" in log.read_text() for log in logs)
    for last in tmp_path.rglob("last.ckpt"):
        assert torch.load(last, weights_only=False)["epoch"] < 199


@pytest.mark.slow
def test_two_workers_share_one_study_and_run_no_trial_twice(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    args = ("sweep", "--space=space.yaml", "--optimizer=Adam", "--n_trials=4", *FIT)
    workers = [start_fixtures(tmp_path, *args) for _ in range(2)]
    results = [finish(worker, 600) for worker in workers]
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    done = trials(tmp_path)
    assert 4 <= len(done) <= 5 and all(t.state.name == "COMPLETE" for t in done)
    workers_of = {t.user_attrs["worker"] for t in done}
    assert len(workers_of) == 2, "both workers ran trials"
    assert len({t.number for t in done}) == len(done)


def test_a_key_missing_from_the_config_is_refused_before_any_trial(tmp_path):
    space = {**SPACE, "params": {"model.hiddn": {"type": "int", "low": 8, "high": 32}}}
    result = sweep(tmp_path, "--n_trials=2", space=space, timeout=120)
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1].startswith("error: search space key 'model.hiddn' is not in")
    )
    assert not (tmp_path / "sweeps" / "sweep").exists() or not list((tmp_path / "sweeps").rglob("trial_*"))


BAD_PARAMS = {
    "unknown-type": ({"type": "gaussian", "low": 0.1, "high": 1}, "use float, int or categorical"),
    "low-above-high": ({"type": "float", "low": 0.1, "high": 0.01}, "swap them"),
    "log-from-zero": ({"type": "float", "low": 0.0, "high": 1, "log": True}, "low must be above 0"),
    "no-choices": ({"type": "categorical", "choices": []}, "non-empty list of choices"),
    "no-high": ({"type": "int", "low": 1}, "needs high"),
}


@pytest.mark.parametrize("case", BAD_PARAMS.values(), ids=BAD_PARAMS.keys())
def test_a_bad_search_space_is_named_in_one_line(tmp_path, case):
    from {{ cookiecutter.package_name }}.kit.sweep import SweepError, load_space

    param, expected = case
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({**SPACE, "params": {"optimizer.init_args.lr": param}}))
    with pytest.raises(SweepError, match=expected) as refusal:
        load_space(path)
    assert "\n" not in str(refusal.value) and "optimizer.init_args.lr" in str(refusal.value)


def test_a_search_space_key_must_name_a_setting_of_the_config():
    from {{ cookiecutter.package_name }}.kit.sweep import Space, SweepError, check_keys

    config = {"optimizer": {"init_args": {"lr": 0.01}}, "model": {"hidden": 16}}
    searched = {"model.hidden": {}, "optimizer.init_args.lr": {}}
    check_keys(Space("val/acc", "maximize", {}, searched, 0), config)
    with pytest.raises(SweepError, match=r"'model.hiddn' is not in the config \('hiddn' not found"):
        check_keys(Space("val/acc", "maximize", {}, {"model.hiddn": {}}, 0), config)


@pytest.mark.parametrize(
    ("metric", "direction", "checkpoint", "settled"),
    [
        (None, None, {"monitor": "val/mse"}, ("val/mse", "minimize")),  # named once, for the checkpoint
        (None, None, {"monitor": "val/score", "mode": "max"}, ("val/score", "maximize")),
        ("val/loss", None, {"monitor": "val/acc"}, ("val/loss", "minimize")),  # by its name
        ("val/acc", "minimize", {"monitor": "val/acc"}, ("val/acc", "minimize")),  # as written
    ],
)
def test_a_sweep_optimizes_the_checkpoints_metric_unless_told_otherwise(
    metric, direction, checkpoint, settled
):
    from {{ cookiecutter.package_name }}.kit.sweep import Space

    space = Space(metric, direction, {}, {}, 0).for_config({"checkpoint": checkpoint})
    assert (space.metric, space.direction) == settled


def test_a_metric_of_no_known_direction_asks_for_one():
    from {{ cookiecutter.package_name }}.kit.sweep import Space, SweepError

    with pytest.raises(SweepError, match="add `direction: maximize` or `direction: minimize`"):
        Space("val/score", None, {}, {}, 0).for_config({"checkpoint": {"monitor": "val/acc"}})


def test_sweep_help_lists_its_own_options():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from {{ cookiecutter.package_name }}.kit.sweep import parse; parse(['--help'])",
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(PROJECT_ROOT / "src"), "PATH": ""},
    )
    for option in ("--n_trials", "--space", "--study", "--storage"):
        assert option in result.stdout


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free port: the kind of database workers share."""
    # The server's own folder (initdb on PATH may be a lone link into it).
    servers = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    found = str(servers[-1]) if servers else shutil.which("initdb")
    if found is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    bindir = Path(found).resolve().parent
    folder = Path(tempfile.mkdtemp(prefix="sweep-pg-"))  # under /tmp: the server's user can reach it
    as_server: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(folder, "postgres")
        as_server = ["runuser", "-u", "postgres", "--"]

    def server(tool: str, *args: object) -> None:
        subprocess.run([*as_server, str(bindir / tool), *map(str, args)], check=True, capture_output=True)

    port, data = free_port(), folder / "data"
    server("initdb", "-D", data, "-U", "sweep", "--auth=trust")
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    server("pg_ctl", "-D", data, "-o", options, "-l", folder / "log", "-w", "start")
    try:
        server("createdb", "-h", "127.0.0.1", "-p", port, "-U", "sweep", "sweeps")
        yield f"postgresql://sweep@127.0.0.1:{port}/sweeps"
    finally:
        server("pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_workers_on_a_postgresql_database_share_one_study(tmp_path, postgres_url):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    storage = f"--storage={postgres_url}"
    args = ("sweep", "--space=space.yaml", "--optimizer=Adam", storage, "--n_trials=3", *FIT)
    results = [finish(worker, 600) for worker in [start_fixtures(tmp_path, *args) for _ in range(2)]]
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    done = optuna.load_study(study_name="sweep", storage=postgres_url).get_trials()
    assert 3 <= len(done) <= 4 and all(t.state.name == "COMPLETE" for t in done)
    assert len({t.user_attrs["worker"] for t in done}) == 2 and len({t.number for t in done}) == len(done)


@pytest.mark.slow
def test_a_trial_whose_worker_was_killed_is_marked_failed_and_the_study_goes_on(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    args = ("sweep", "--space=space.yaml", "--optimizer=Adam", "--n_trials=2", "--trainer.max_epochs=50")
    worker = start_fixtures(tmp_path, *args)
    deadline = time.monotonic() + 120
    while not list(tmp_path.rglob("metrics.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(worker.pid, signal.SIGKILL)  # the worker and its trial, as a lost machine would
    worker.wait()
    (tmp_path / "sweeps" / "sweep" / "trial_000" / "metrics.jsonl").unlink()
    again = sweep(tmp_path, "--n_trials=2", *FIT)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "Trial 0: its worker" in again.stdout
    assert [t.state.name for t in trials(tmp_path)] == ["FAIL", "COMPLETE", "COMPLETE"]
