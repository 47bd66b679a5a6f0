"""scripts/slurm.sbatch on a real SLURM cluster: this machine as one node (tests/kit/slurm_cluster.py).

Each test submits the project's own script with `sbatch`, test-sized: 2 tasks on the CPU, DDP
over gloo, a few short epochs. The scheduler, not the test, starts the tasks, sends the
signals, requeues and restarts the job. Run by `nox -s slurm`; they skip, saying why, where no
cluster can be set up (not root, no apt-get, a daemon that does not start).
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from slurm_cluster import Cluster, ClusterSetupError, running

from conftest import MAIN, PROJECT_ROOT, main_py_environment

pytestmark = pytest.mark.slow
# `nox -s slurm` runs two workers (`-n 2 --dist=loadgroup`), each with a cluster of its own: the
# tests mostly wait on the scheduler. Those compared with the uninterrupted job share one worker,
# so that job runs once; the others take the second worker.
COMPARED = pytest.mark.xdist_group("compared-with-the-uninterrupted-job")
ALONE = pytest.mark.xdist_group("alone")

SCRIPT = PROJECT_ROOT / "scripts" / "slurm.sbatch"
SWEEP_SCRIPT = PROJECT_ROOT / "scripts" / "sweep.sbatch"
EPOCHS = 5
TRAIN_IMAGES = 1258
STEPS_PER_EPOCH = 10  # 629 training images per task, 64 a batch
# Overrides of the script's #SBATCH lines for this one 2-CPU node; the rest (--signal, --requeue) stay.
SBATCH = (
    "--nodes=1",
    "--ntasks-per-node=2",
    "--cpus-per-task=1",
    "--gpus-per-node=0",
    "--time=10",  # minutes
    "--output=slurm-%j.out",
)
TRAIN = (
    "--trainer.accelerator=cpu",
    f"--trainer.max_epochs={EPOCHS}",
    f"--lr_scheduler.init_args.T_max={EPOCHS}",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--last_checkpoint.every_n_train_steps=5",
    "--trainer.callbacks+=test_slurm.StepsSeen",
)
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


class StepsSeen(L.Callback):
    """Each task writes the step it ended at: steps-<attempt>-rank<N>.json (a stop included)."""

    def _write(self, trainer: L.Trainer) -> None:
        attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
        Path(f"steps-{attempt}-rank{trainer.global_rank}.json").write_text(
            json.dumps({"global_step": trainer.global_step, "world_size": trainer.world_size})
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, error: BaseException) -> None:
        self._write(trainer)


class SlowFirstAttempt(L.Callback):
    """Sleeps `seconds` after each training step of the job's first attempt only: a run long
    enough for SLURM's time-limit warning to reach it, without changing what it computes."""

    def __init__(self, seconds: float = 2.5) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: object) -> None:
        if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
            time.sleep(self.seconds)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        with running(tmp_path_factory.mktemp("slurm")) as started:
            yield started
    except ClusterSetupError as why:
        pytest.skip(f"no SLURM cluster: {why}")


def job_folder(folder: Path) -> Path:
    """A folder to submit from, as the project's: main.py and configs/ (logs/ lands here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").symlink_to(MAIN)
    (folder / "configs").symlink_to(PROJECT_ROOT / "configs")
    return folder


def submit(cluster: Cluster, folder: Path, *main_flags: str, sbatch: tuple[str, ...] = ()) -> str:
    """`sbatch SBATCH scripts/slurm.sbatch TRAIN MAIN_FLAGS` from `folder`; the job id."""
    env = {**main_py_environment(), "SLURM_CONF": cluster.env["SLURM_CONF"]}
    command = (
        "sbatch",
        "--parsable",
        f"--chdir={folder}",
        *SBATCH,
        *sbatch,
        str(SCRIPT),
        *TRAIN,
        *main_flags,
    )
    result = cluster.run(*command, env=env)
    return result.stdout.strip().split(";")[0]


def wait_for(cluster: Cluster, job: str, states: tuple[str, ...], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = cluster.job(job)
        if info.get("JobState") in states:
            return info
        time.sleep(0.5)
    pytest.fail(f"job {job} not {'/'.join(states)} after {timeout} s: {cluster.job(job)}")


def wait_for_file(folder: Path, pattern: str, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
        time.sleep(0.3)
    pytest.fail(f"no {pattern} under {folder} after {timeout} s")


def output(folder: Path, job: str) -> str:
    return (folder / f"slurm-{job}.out").read_text(errors="replace")


def processes_of(cluster: Cluster, job: str) -> list[int]:
    """PIDs of processes still running for `job` of `cluster` (other clusters may run on this
    machine, numbering their jobs from 1 too): SLURM puts both variables in each task's environment."""
    markers = (f"SLURM_JOB_ID={job}\0".encode(), f"SLURM_CONF={cluster.env['SLURM_CONF']}\0".encode())
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes() if entry.name.isdigit() else b""
            if all(marker in environ for marker in markers):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(cluster: Cluster, job: str) -> None:
    for _ in range(20):  # slurmstepd reaps the tasks just after the job's state changes
        if not processes_of(cluster, job):
            return
        time.sleep(0.5)
    pytest.fail(f"processes of job {job} still running: {processes_of(cluster, job)}")


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def steps_seen(folder: Path, attempt: int) -> list[int]:
    reports = sorted(folder.glob(f"steps-{attempt}-rank*.json"))
    return [json.loads(path.read_text())["global_step"] for path in reports]


@pytest.fixture(scope="module")
def uninterrupted(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    folder = job_folder(tmp_path_factory.mktemp("uninterrupted"))
    job = submit(cluster, folder)
    info = wait_for(cluster, job, ENDED, timeout=300)
    return folder, job, info


@COMPARED
def test_a_job_runs_to_completion_in_one_run_folder(cluster, uninterrupted):
    folder, job, info = uninterrupted
    ended = (info["JobState"], info["ExitCode"], info["Restarts"])
    assert ended == ("COMPLETED", "0:0", "0"), output(folder, job)
    (run_dir,) = (folder / "logs").glob("*/version_*")
    checkpoints = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    assert len(checkpoints) == 2 and checkpoints[0].startswith("best-") and checkpoints[1] == "last.ckpt"
    assert load(run_dir / "checkpoints" / "last.ckpt")["global_step"] == EPOCHS * STEPS_PER_EPOCH
    assert steps_seen(folder, 0) == [EPOCHS * STEPS_PER_EPOCH] * 2  # both tasks trained every step
    assert_nothing_left(cluster, job)


def assert_resumed_exactly(folder: Path, uninterrupted_folder: Path) -> None:
    """The requeued job went on in the first attempt's run folder and ended where a job never
    stopped ends: the same step, bit-identical weights."""
    (run_dir,) = (folder / "logs").glob("*/version_*")
    resumed = load(run_dir / "checkpoints" / "last.ckpt")
    straight = load(next(uninterrupted_folder.rglob("last.ckpt")))
    assert resumed["global_step"] == straight["global_step"] == EPOCHS * STEPS_PER_EPOCH
    for name, weights in straight["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], weights), name


@COMPARED
def test_slurms_warning_stops_every_task_at_one_step_and_the_requeued_job_resumes_exactly(
    cluster, tmp_path, uninterrupted
):
    folder = job_folder(tmp_path)
    job = submit(cluster, folder)
    wait_for_file(folder, "last.ckpt")  # training is under way: the first periodic save is done
    cluster.run("scancel", "--signal=USR1", job)  # what --signal=USR1@90 sends before the time limit

    info = wait_for(cluster, job, ENDED, timeout=300)  # requeued, restarted, finished
    text = output(folder, job)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), text
    assert text.count("SLURM's time-limit warning") == 2 and f"Requeued SLURM job {job}" in text, text
    stopped = steps_seen(folder, 0)  # both tasks stopped at one step, before the end
    assert len(stopped) == 2 and stopped[0] == stopped[1] < EPOCHS * STEPS_PER_EPOCH
    assert "Restored all states from the checkpoint at logs/lightning_logs/" in text
    assert steps_seen(folder, 1) == [EPOCHS * STEPS_PER_EPOCH] * 2  # SLURM_RESTART_COUNT=1 resumed
    assert_resumed_exactly(folder, uninterrupted[0])
    assert_nothing_left(cluster, job)


@COMPARED
def test_the_time_limit_warning_requeues_the_job_and_it_resumes_exactly(cluster, tmp_path, uninterrupted):
    """Nothing sent by hand: the script's --signal=SIGUSR1@90 under a 3-minute limit.

    SLURM checks time limits every 30 s and sends the warning up to that much before or after
    it is due (here 60 to 120 s after the start). The first attempt's steps are slowed so that
    it is still training then (a warning during start-up is the next test's).
    """
    folder = job_folder(tmp_path)
    slow = ("--trainer.callbacks+=test_slurm.SlowFirstAttempt",)
    job = submit(cluster, folder, *slow, sbatch=("--time=3",))
    info = wait_for(cluster, job, ENDED, timeout=400)
    text = output(folder, job)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert int(info["Restarts"]) >= 1 and "SLURM's time-limit warning" in text, text
    stopped = steps_seen(folder, 0)
    assert len(stopped) == 2 and stopped[0] == stopped[1] < EPOCHS * STEPS_PER_EPOCH
    assert_resumed_exactly(folder, uninterrupted[0])
    assert_nothing_left(cluster, job)


def catching(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signum - 1) & 1)


def main_py_tasks(cluster: Cluster, job: str) -> list[int]:
    """The job's `python main.py` processes (not srun, whose command line names main.py too)."""
    tasks = []
    for pid in processes_of(cluster, job):
        with contextlib.suppress(OSError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if Path(args[0].decode()).name.startswith("python") and b"main.py" in args:
                tasks.append(pid)
    return tasks


@COMPARED
def test_slurms_warning_during_start_up_requeues_the_job_and_it_completes(cluster, tmp_path, uninterrupted):
    """SIGUSR1 while the tasks still import torch: noted from main.py's first line, it stops
    training at its first step; the requeued job resumes and ends as one never stopped."""
    folder = job_folder(tmp_path)
    job = submit(cluster, folder)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # both tasks run main.py and catch SIGUSR1: still starting
        tasks = main_py_tasks(cluster, job)
        if len(tasks) == 2 and all(catching(pid, signal.SIGUSR1) for pid in tasks):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the tasks of job {job} never caught SIGUSR1 while starting: {output(folder, job)}")
    assert not list(folder.rglob("last.ckpt")), "training had started already"
    cluster.run("scancel", "--signal=USR1", job)

    info = wait_for(cluster, job, ENDED, timeout=300)
    text = output(folder, job)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), text
    assert text.count("SLURM's warning signal during start-up") == 2, text
    assert f"Requeued SLURM job {job}" in text, text
    assert steps_seen(folder, 0) == [1, 1], text  # the ranks stopped together at the first step
    assert_resumed_exactly(folder, uninterrupted[0])
    assert_nothing_left(cluster, job)


@ALONE
def test_an_error_on_one_task_ends_the_whole_job(cluster, tmp_path):
    folder = job_folder(tmp_path)
    job = submit(cluster, folder, "--trainer.callbacks+=faults.RaiseAt", "--trainer.callbacks.step=3")
    wait_for(cluster, job, ("RUNNING",), timeout=60)
    info = wait_for(cluster, job, ENDED, timeout=90)  # the start (~20 s) and the error's end
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", info
    assert info["Restarts"] == "0"  # a failure is not requeued
    assert "simulated on rank 1" in output(folder, job)
    assert_nothing_left(cluster, job)


@ALONE
def test_scancel_leaves_no_process_and_nothing_half_written(cluster, tmp_path):
    folder = job_folder(tmp_path)
    job = submit(cluster, folder)
    wait_for_file(folder, "last.ckpt")
    assert processes_of(cluster, job)  # the batch script, srun and the two tasks
    cluster.run("scancel", job)  # SIGTERM to every task, SIGKILL after KillWait (30 s)
    info = wait_for(cluster, job, ENDED, timeout=60)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", info
    assert_nothing_left(cluster, job)
    assert not list(folder.rglob("*.partial")) and not list(folder.rglob("*.tmp"))
    stopped = steps_seen(folder, 0)  # the tasks stopped together and saved that step
    (last,) = folder.rglob("last.ckpt")
    assert len(stopped) == 2 and stopped[0] == stopped[1] == load(last)["global_step"]
    for checkpoint in folder.rglob("*.ckpt"):
        assert load(checkpoint)["global_step"] > 0


SWEEP_TRAIN = (
    "--trainer.accelerator=cpu",
    "--trainer.max_epochs=1",
    "--lr_scheduler.init_args.T_max=1",
    "--trainer.enable_progress_bar=false",
)


def submit_sweep(cluster: Cluster, folder: Path, *sweep_flags: str) -> str:
    """scripts/sweep.sbatch as a 2-task job array (two workers of one study) from `folder`."""
    env = {**main_py_environment(), "SLURM_CONF": cluster.env["SLURM_CONF"]}
    submitted = cluster.run(
        "sbatch",
        "--parsable",
        f"--chdir={folder}",
        "--array=0-1",  # two workers
        "--gpus-per-task=0",
        "--cpus-per-task=1",
        str(SWEEP_SCRIPT),
        *sweep_flags,
        env=env,
    )
    return submitted.stdout.strip().split(";")[0]


def load_study(folder: Path, name: str):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(folder / "logs" / "sweeps" / name / "journal.log")))
    return optuna.load_study(study_name=name, storage=storage)


@ALONE
def test_a_sweep_runs_as_a_job_array_whose_workers_share_one_study_with_ddp_trials(cluster, tmp_path):
    """Each trial is DDP on the CPU (2 processes) inside its 1-task worker: Lightning starts the
    processes, as on any machine (the sweep gives its trials no SLURM variables)."""
    optuna = pytest.importorskip("optuna", reason='needs the sweep extra: pip install -e ".[sweep]"')
    folder = job_folder(tmp_path)
    ddp = ("-c", "configs/presets/ddp_cpu.yaml")
    job = submit_sweep(cluster, folder, "--n_trials=2", "--study=array", *ddp, *SWEEP_TRAIN)
    for task in ("0", "1"):
        info = wait_for(cluster, f"{job}_{task}", ENDED, timeout=600)
        assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), output(folder, f"{job}_{task}")

    study_dir = folder / "logs" / "sweeps" / "array"
    trials = load_study(folder, "array").get_trials()
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(trials) == 2 and all(trial.state in done for trial in trials), trials
    assert len({trial.user_attrs["worker"] for trial in trials}) == 2  # both workers ran trials
    assert len({tuple(sorted(trial.params.items())) for trial in trials}) == 2  # each its own settings
    for trial in trials:  # one epoch of half the training images each: the two ranks shared them
        (last,) = (study_dir / f"trial_{trial.number:03d}").glob("*/version_*/checkpoints/last.ckpt")
        per_rank, batch_size = TRAIN_IMAGES // 2, trial.params["data.batch_size"]
        assert load(last)["global_step"] in (per_rank // batch_size, -(-per_rank // batch_size))

    trained = subprocess.run(
        [sys.executable, "main.py", "fit", "-c", str(study_dir / "best.yaml"), "--trainer.max_steps=2"],
        cwd=folder,
        env=main_py_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]


class SlowSteps(L.Callback):
    """Sleeps after each training step, long enough for a test to stop a trial mid-epoch, and
    says at which step each run starts training (in the trial's output.log)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        print(f"Training starts at step {trainer.global_step}", flush=True)

    def on_train_batch_end(self, *args: object) -> None:
        time.sleep(0.4)


@ALONE
def test_a_preempted_sweep_worker_is_requeued_and_resumes_its_trial_from_its_checkpoint(cluster, tmp_path):
    optuna = pytest.importorskip("optuna", reason='needs the sweep extra: pip install -e ".[sweep]"')
    folder = job_folder(tmp_path)
    space = {  # no pruner: every trial runs to its end
        "metric": "val/acc",
        "seed": 0,
        "pruner": "none",
        "params": {"optimizer.init_args.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
    }
    (folder / "space.yaml").write_text(json.dumps(space))
    train = ("--trainer.max_epochs=2", "--lr_scheduler.init_args.T_max=2")
    flags = ("--n_trials=2", "--study=preempted", "--space=space.yaml", *SWEEP_TRAIN, *train)
    job = submit_sweep(cluster, folder, *flags, "--trainer.callbacks+=test_slurm.SlowSteps")
    worker = f"{job}_0"
    study_dir = folder / "logs" / "sweeps" / "preempted"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # worker 0's first trial has finished its first epoch
        log = folder / f"slurm-{worker}.out"
        started = re.search(r"Trial (\d+): ", log.read_text(errors="replace") if log.is_file() else "")
        if started:
            number = int(started[1])
            if len(sweep_records(study_dir / f"trial_{number:03d}")) == 1:
                break
        time.sleep(0.3)
    else:
        pytest.fail(f"worker {worker} finished no epoch: {output(folder, worker)}")
    cluster.run("scancel", "--batch", "--signal=USR1", worker)  # what --signal=B:USR1@90 sends

    ended = [wait_for(cluster, f"{job}_{task}", ENDED, timeout=600) for task in ("0", "1")]
    text = output(folder, worker)
    assert [(info["JobState"], info["ExitCode"]) for info in ended] == [("COMPLETED", "0:0")] * 2, text
    assert ended[0]["Restarts"] == "1" and f"Requeued SLURM job {worker}" in text, text
    trials = load_study(folder, "preempted").get_trials()
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE] * 2, text
    assert len({trial.params["optimizer.init_args.lr"] for trial in trials}) == 2  # none run twice
    trial_dir = study_dir / f"trial_{number:03d}"
    assert f"Trial {number}: resumed from {trial_dir.resolve()}" in text, text
    assert [record["epoch"] for record in sweep_records(trial_dir)] == [0, 1]  # each epoch reported once
    assert sorted(trials[number].intermediate_values) == [0, 1]

    log = (trial_dir / "output.log").read_text()  # both runs of the trial, in one run folder
    starts = [int(step) for step in re.findall(r"Training starts at step (\d+)", log)]
    assert len(starts) == 2 and starts[0] == 0 < starts[1], log  # the second went on from the first
    assert len(list(trial_dir.glob("*/version_*"))) == 1
    last = study_dir.glob("trial_*/*/version_*/checkpoints/last.ckpt")
    steps = {load(path)["global_step"] for path in last}
    assert len(steps) == 1 and steps.pop() > starts[1]  # every trial, the resumed one too, trained as long
    assert (study_dir / "best.yaml").read_text().startswith("# Trial ")


def sweep_records(trial_dir: Path) -> list[dict]:
    path = trial_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
