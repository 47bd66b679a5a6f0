"""`sweep`: an Optuna study whose trials are ordinary `fit` runs of this project.

Every trial is `fit` in a process of its own with the flags you gave `sweep` plus the sampled
settings, so presets, DDP, `--data.batch_size=auto`, checkpoints and TensorBoard apply
unchanged. The trial writes its validation metric after each epoch (`MetricsFile`); this
process reports it to Optuna and, when the pruner says so, stops the trial with SIGTERM: every
rank then stops together at the next step, as for any preemption. The study lives in storage
(a journal file under the logs folder, or any `--storage` URL), so rerunning the command, or
starting more workers on other machines, continues the same study.

Under SLURM (scripts/sweep.sbatch) a worker is one task of a job array. SLURM's warning before
the time limit (SIGUSR1) stops its running trial cleanly (it saves `last.ckpt`), requeues the
job, and the restarted worker resumes that trial from its checkpoint: the trial stays `running`
in the study meanwhile, marked with the job's id, which a requeue keeps.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy
import yaml

from . import early_signal, launcher, trackers
from .callbacks import metric_mode
from .errors import EXIT_STOPPED, ArgumentParser
from .files import write_atomically
from .internals import trial_to_report_to

POLL_S = 0.5  # how often this process reads a running trial's metrics
PRUNED_AFTER_S = 120  # a pruned trial still running after this long is killed
DEFAULT_SPACE = Path("configs/sweep.yaml")


class SweepError(Exception):
    """A sweep that cannot start as asked; the message names the problem and the fix."""


class MetricsFile(L.Callback):
    """Appends `{"epoch": N, "value": V}` to `path` after each validation (rank 0 only).

    (The trial's sampled settings reach TensorBoard's HParams tab as any run's do: they are
    flags of its `fit`, which logs its settings under their config names, kit/run_loggers.py.)
    """

    def __init__(self, path: str, metric: str = "val/acc") -> None:
        self.path = Path(path)
        self.metric = metric

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            known = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise SweepError(f"the sweep's metric {self.metric!r} was not logged; logged: {known}")
        record = {"epoch": trainer.current_epoch, "value": float(value)}
        if trainer.loggers and getattr(trainer.loggers[0], "log_dir", None):
            # Where the run's config.yaml is, also when a preset's logger writes outside the trial
            # folder (trainer.log_dir would wait for the other DDP ranks; this runs on rank 0).
            record["run_dir"] = str(Path(trainer.loggers[0].log_dir).resolve())
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")


@dataclass
class Space:
    """The search space file: the metric, its direction, the pruner and each setting's range.

    Without a `metric`, the sweep optimizes what the project's best checkpoint watches
    (`checkpoint.monitor`), so a project names its metric once; without a `direction`, the
    metric's name says it, as for the checkpoint (`for_config`)."""

    metric: str | None
    direction: Literal["maximize", "minimize"] | None
    pruner: dict[str, Any]
    params: dict[str, dict[str, Any]]
    seed: int | None

    def for_config(self, config: dict[str, Any]) -> "Space":
        """This space with its metric and direction settled, from `fit`'s config where unset."""
        checkpoint = config.get("checkpoint") or {}
        metric = self.metric or checkpoint.get("monitor") or "val/acc"
        mode = checkpoint.get("mode") if metric == checkpoint.get("monitor") else None
        if self.direction is None:
            try:
                mode = mode or metric_mode(metric)
            except ValueError:
                raise SweepError(
                    f"the sweep cannot tell whether {metric} is better higher or lower: "
                    "add `direction: maximize` or `direction: minimize` to the search space"
                ) from None
        direction = self.direction or ("maximize" if mode == "max" else "minimize")
        return replace(self, metric=metric, direction=direction)


def load_space(path: Path) -> Space:
    if not path.is_file():
        raise SweepError(f"search space {path} does not exist: pass --space=FILE, e.g. configs/sweep.yaml")
    try:
        spec = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split())
        raise SweepError(f"search space {path} is not YAML ({reason}); see configs/sweep.yaml") from None
    if not isinstance(spec, dict):
        raise SweepError(f"search space {path} holds a {type(spec).__name__}; see configs/sweep.yaml")
    params = spec.get("params") or {}
    if not params:
        raise SweepError(f"search space {path} names no params: add e.g. `optimizer.init_args.lr`")
    for key, param in params.items():
        kind = param.get("type")
        if kind not in ("float", "int", "categorical"):
            raise SweepError(f"{path}: {key} has type {kind!r}; use float, int or categorical")
        if kind == "categorical" and not param.get("choices"):
            raise SweepError(f"{path}: {key} (categorical) needs a non-empty list of choices")
        needed = ("choices",) if kind == "categorical" else ("low", "high")
        missing = [name for name in needed if name not in param]
        if missing:
            raise SweepError(f"{path}: {key} ({kind}) needs {' and '.join(missing)}")
        if kind != "categorical" and not param["low"] < param["high"]:
            raise SweepError(f"{path}: {key} has low {param['low']} >= high {param['high']}; swap them")
        if param.get("log") and param["low"] <= 0:
            raise SweepError(f"{path}: {key} is log-scaled, so low must be above 0, not {param['low']}")
    direction = spec.get("direction")
    if direction not in (None, "maximize", "minimize"):
        raise SweepError(f"{path}: direction {direction!r}; use maximize or minimize")
    pruner = spec.get("pruner") or {"type": "median"}
    pruner = {"type": pruner} if isinstance(pruner, str) else pruner
    return Space(spec.get("metric"), direction, pruner, params, spec.get("seed"))


def check_keys(space: Space, config: dict[str, Any]) -> None:
    """Every searched key exists in the config `fit` would use; one line per sweep otherwise."""
    for key in space.params:
        node: Any = config
        for part in key.split("."):
            if isinstance(node, dict) and part not in node and part in (node.get("init_args") or {}):
                node = node["init_args"]  # as the flags read it: model.network is model.init_args.network
            if not isinstance(node, dict) or part not in node:
                raise SweepError(
                    f"search space key {key!r} is not in the config ({part!r} not found): use the keys "
                    "`python main.py fit --print_config` shows, e.g. optimizer.init_args.lr"
                )
            node = node[part]


def make_pruner(spec: dict[str, Any]) -> Any:
    import optuna

    kind = spec.get("type", "median")
    settings = {key: value for key, value in spec.items() if key != "type"}
    pruners = {
        "median": optuna.pruners.MedianPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "threshold": optuna.pruners.ThresholdPruner,
        "none": optuna.pruners.NopPruner,
    }
    if kind not in pruners:
        raise SweepError(f"pruner {kind!r}: use one of {', '.join(pruners)}")
    return pruners[kind](**settings)


def suggest(trial: Any, key: str, param: dict[str, Any]) -> Any:
    if param["type"] == "categorical":
        return trial.suggest_categorical(key, param["choices"])
    low, high, step, log = param["low"], param["high"], param.get("step"), param.get("log", False)
    if param["type"] == "int":
        return trial.suggest_int(key, low, high, step=step or 1, log=log)
    return trial.suggest_float(key, low, high, step=step, log=log)


def flag(key: str, value: Any) -> str:
    return f"--{key}={value if isinstance(value, str) else json.dumps(value)}"


def print_config(fit_command: Sequence[str], fit_args: Sequence[str]) -> dict[str, Any]:
    """The full config `fit` would run with these flags; `fit`'s own one-line error otherwise."""
    result = subprocess.run([*fit_command, *fit_args, "--print_config"], capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        raise SweepError(f"the fit flags given to sweep are refused: {reason}")
    return yaml.safe_load(result.stdout)


def storage_for(url: str | None, study_dir: Path) -> Any:
    """`url` as given, or a journal file in the study's folder (safe for several local workers)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if url:
        return url
    journal = study_dir / "journal.log"
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SweepError(f"cannot write the sweep's journal {journal}: {error.strerror}") from None
    try:
        return JournalStorage(JournalFileBackend(str(journal)))  # replays the journal
    except Exception as error:
        raise damaged(journal, error) from None


def damaged(journal: Path, error: Exception) -> SweepError:
    """A journal Optuna cannot replay (cut short, edited, not a journal): named, never rewritten."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    return SweepError(
        f"the sweep's journal {journal} is damaged ({type(error).__name__}: {first_line}); it is left as "
        "it is: move it aside to start the study anew, or pass --study=NEW_NAME"
    )


def open_study(attempts: int = 5, journal: Path | None = None, **settings: Any) -> Any:
    """Create the study or join it. Workers that start together on a new database race to
    create its tables; the losers wait a moment and join. A storage that stays unreachable,
    or cannot be read, ends the sweep with one line, and is left as it is (`journal`: the file
    of a journal storage, to name)."""
    import optuna

    for attempt in range(attempts):
        try:
            return optuna.create_study(load_if_exists=True, **settings)
        except Exception as error:  # the database driver's own errors, whatever the driver
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            if journal is not None:
                raise damaged(journal, error) from None
            # Only a lost race (tables created twice: an IntegrityError, or PostgreSQL's
            # DuplicateTable as a ProgrammingError) or a busy server is worth another attempt.
            lost_race = type(error).__name__ == "ProgrammingError" and "already exists" in first_line
            transient = lost_race or type(error).__name__ in ("OperationalError", "IntegrityError")
            transient = transient and type(error).__module__.startswith("sqlalchemy")
            if not transient or attempt == attempts - 1:
                raise SweepError(f"--storage cannot be opened: {first_line}") from None
            time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def fail_abandoned_trials(study: Any) -> None:
    """Trials left RUNNING by a worker that no longer exists are marked failed: one of this
    machine whose process is gone, or a SLURM job no longer queued (a requeued one resumes its own)."""
    import optuna

    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if job := trial.user_attrs.get("slurm_job"):
            if not slurm_job_queued(job):
                study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                print(f"Trial {trial.number}: its SLURM job {job} has ended; marked failed.")
            continue
        worker_host, _, pid = str(trial.user_attrs.get("worker", "")).partition(":")
        if worker_host == host and pid.isdigit() and not pid_alive(int(pid)):
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            print(f"Trial {trial.number}: its worker (PID {pid}) is gone; marked failed.")


def slurm_job_queued(job: str) -> bool:
    """Whether SLURM job `job` is still pending or running (requeued included); True when
    squeue cannot tell (not on the cluster): its trial is then left as it is."""
    try:
        result = subprocess.run(
            ["squeue", "--noheader", f"--jobs={job}", "--states=all", "--format=%T"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if result.returncode != 0:  # squeue refuses an id it no longer knows: the job is long gone
        return "Invalid job id" not in result.stderr
    states = set(result.stdout.split())
    return bool(states & {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"})


def own_interrupted_trial(study: Any, job: str | None) -> Any:
    """The trial this SLURM job was running when it was stopped to be requeued, as an
    `optuna.trial.Trial` to report to; None when there is none."""
    import optuna

    if job is None:
        return None
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if trial.user_attrs.get("slurm_job") == job:
            return trial_to_report_to(study, trial)  # kit/internals.py says why
    return None


class Preemption:
    """SLURM's warning to this worker (SIGUSR1, `#SBATCH --signal=B:USR1@N`), noted from the
    process's first moment (kit/early_signal.py) until the sweep ends."""

    def __init__(self) -> None:
        self.requested = False
        if "SLURM_JOB_ID" in os.environ:
            signal.signal(early_signal.REQUEUE_SIGNAL, self._note)
            self.requested = early_signal.take()

    def _note(self, signum: int, frame: Any) -> None:
        if not self.requested:
            print("SLURM's warning signal: stopping the trial to requeue this worker.", flush=True)
        self.requested = True

    def requeue(self) -> int:
        """Requeue this job; the exit code of a worker stopped to be requeued."""
        print(launcher.requeue_slurm_job(), flush=True)
        return EXIT_STOPPED


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_trial(
    study: Any,
    trial: Any,
    command: list[str],
    metrics: Path,
    log: Path,
    env: dict[str, str] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[str, float | None]:
    """Run one trial's `fit`, reporting each epoch's metric; ("complete"|"pruned"|"failed"|
    "stopped", best). `stop()` true: the trial is stopped to be resumed later ("stopped").

    A resumed trial appends to the metrics (and output) of its first run: epochs reported
    then are not reported again."""
    earlier = read_records(metrics)
    values: list[float] = [record["value"] for record in earlier]
    reported = {record["epoch"] for record in earlier}
    pruned_at: float | None = None
    stopped = False
    with log.open("a" if earlier else "w") as output:
        # A session of its own: the trial's signals reach its ranks, never this process.
        # SIGUSR1 ignored: under SLURM it is the sweep's to answer (see Preemption), not the trial's.
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            preexec_fn=lambda: signal.signal(early_signal.REQUEUE_SIGNAL, signal.SIG_IGN),
        )
        try:
            seen = len(earlier)
            killed = False
            while process.poll() is None or seen < count_lines(metrics):
                if stop() and not stopped and pruned_at is None:
                    stopped = signal_trial(process, signal.SIGTERM)  # saves last.ckpt, exits 143
                for record in read_records(metrics)[seen:]:
                    seen += 1
                    if record["epoch"] in reported:
                        continue
                    reported.add(record["epoch"])
                    values.append(record["value"])
                    trial.report(record["value"], record["epoch"])
                    if pruned_at is None and trial.should_prune():
                        pruned_at = time.monotonic()
                        signal_trial(process, signal.SIGTERM)  # every rank stops at the next step
                if pruned_at is not None and not killed and time.monotonic() - pruned_at > PRUNED_AFTER_S:
                    killed = signal_trial(process, signal.SIGKILL)
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C in the sweep: stop the trial too, cleanly
            signal_trial(process, signal.SIGTERM)
            process.wait()
            raise
    best = (max if study.direction.name == "MAXIMIZE" else min)(values) if values else None
    if pruned_at is not None:
        return "pruned", best
    if stopped and process.returncode != 0:
        return "stopped", best
    return ("complete" if process.returncode == 0 and best is not None else "failed"), best


def signal_trial(process: subprocess.Popen, signum: int) -> bool:
    """Send `signum` to the trial's process group, once; False when the trial has already ended.

    A trial that has exited and been waited for is left alone: its group id may belong to
    another process by now. The group is the trial's own session, never this process's.
    """
    if process.poll() is not None:
        return False
    try:
        group = os.getpgid(process.pid)
        if group == os.getpgrp():
            raise RuntimeError(f"trial {process.pid} shares the sweep's process group")
        os.killpg(group, signum)
    except ProcessLookupError:  # it ended just now
        return False
    return True


def count_lines(path: Path) -> int:
    return len(read_records(path))


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def summary(study: Any) -> str:
    """A table of every trial: number, state, metric, parameters."""
    rows = [("trial", "state", "value", "params")]
    for trial in study.get_trials(deepcopy=False):
        value = "" if trial.value is None else f"{trial.value:.4f}"
        params = ", ".join(f"{key}={format_value(v)}" for key, v in trial.params.items())
        rows.append((str(trial.number), trial.state.name.lower(), value, params))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows)


def importances(study: Any) -> str:
    """Which settings mattered most so far (Optuna's estimate); empty before two finished trials."""
    import optuna

    if len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) < 2:
        return ""
    try:
        scores = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError):  # e.g. every trial sampled the same values
        return ""
    shown = ", ".join(f"{key} {score:.2f}" for key, score in scores.items())
    return f"Importance of each setting (sums to 1): {shown}" if shown else ""


def format_value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_best(study: Any, study_dir: Path, root_dir: Any) -> Path | None:
    """The best trial's full config as `best.yaml`: `fit -c best.yaml` trains it again."""
    try:
        best = study.best_trial
    except ValueError:
        return None
    folder = study_dir / f"trial_{best.number:03d}"
    configs = sorted(folder.glob("*/version_*/config.yaml"))
    configs += [
        Path(r["run_dir"]) / "config.yaml" for r in read_records(folder / "metrics.jsonl") if "run_dir" in r
    ]
    configs = [path for path in configs if path.is_file()]
    if not configs:
        return None
    config_path = configs[0]
    config = yaml.safe_load(config_path.read_text())
    trainer = config.get("trainer") or {}
    trainer["default_root_dir"] = root_dir  # the user's own, not the trial's folder
    callbacks = trainer.get("callbacks") or []
    trainer["callbacks"] = [c for c in callbacks if not str(c.get("class_path", "")).endswith(".MetricsFile")]
    path = study_dir / "best.yaml"
    header = f"# Trial {best.number} of study {study.study_name}: {best.value}\n"
    write_atomically(path, header + yaml.safe_dump(config, sort_keys=False))  # workers may end together
    return path


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = ArgumentParser(
        prog="python main.py sweep",
        description="Hyperparameter search with Optuna; every other flag goes to each trial's `fit`.",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--n_trials", type=int, default=10, help="trials in the study, all workers together (default: 10)")
    add("--space", type=Path, default=DEFAULT_SPACE, help="search space file (default: %(default)s)")
    add("--study", default="sweep", help="study name; its folder: <logs>/sweeps/<study> (default: sweep)")
    add("--storage", help="storage URL shared by workers, e.g. postgresql://... (default: a journal file)")
    args, fit_args = parser.parse_known_args(list(argv))
    if args.n_trials < 1:
        parser.error(f"--n_trials must be 1 or more, got {args.n_trials}")
    return args, fit_args


def main(fit_command: Sequence[str], argv: Sequence[str]) -> int:
    """Run the sweep; exit code 0, or 2 with one line for a sweep that cannot start."""
    args, fit_args = parse(argv)
    try:
        import optuna
    except ImportError:
        print('error: sweep needs Optuna: pip install -e ".[sweep]"', file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        space = load_space(args.space)
        config = print_config(fit_command, fit_args)
        check_keys(space, config)
        space = space.for_config(config)
        root_dir = (config.get("trainer") or {}).get("default_root_dir") or "."
        study_dir = Path(root_dir) / "sweeps" / args.study
        study = open_study(
            study_name=args.study,
            storage=storage_for(args.storage, study_dir),
            journal=None if args.storage else study_dir / "journal.log",
            direction=space.direction,
            pruner=make_pruner(space.pruner),
        )
        seed = worker_seed(space.seed, len(study.get_trials(deepcopy=False)))
        study.sampler = optuna.samplers.TPESampler(seed=seed)
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    preemption = Preemption()
    slurm_job = launcher.slurm_job_id()
    resumed = own_interrupted_trial(study, slurm_job)  # this job was requeued mid-trial
    fail_abandoned_trials(study)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    while True:
        if preemption.requested:
            return preemption.requeue()
        resume_from: Path | None = None
        if resumed is not None:
            trial, resumed = resumed, None
            params = trial.params
            folder = study_dir / f"trial_{trial.number:03d}"
            resume_from = newest_last_checkpoint(folder)
            print(f"Trial {trial.number}: resumed from {resume_from or 'the start'}", flush=True)
        else:
            finished = study.get_trials(deepcopy=False, states=counted_states())
            if len(finished) >= args.n_trials:
                break
            trial = study.ask()
            trial.set_user_attr("worker", worker)
            if slurm_job:
                trial.set_user_attr("slurm_job", slurm_job)
            params = {key: suggest(trial, key, param) for key, param in space.params.items()}
            folder = study_dir / f"trial_{trial.number:03d}"
        if resume_from is None:  # a new trial, or one stopped before its first checkpoint
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
        metrics = folder / "metrics.jsonl"
        command = [
            *fit_command,
            *fit_args,
            *(flag(key, value) for key, value in params.items()),
            *([f"--ckpt_path={resume_from}"] if resume_from else []),
            f"--trainer.default_root_dir={folder}",
            f"--trainer.callbacks+={MetricsFile.__module__}.MetricsFile",
            f"--trainer.callbacks.path={metrics}",
            f"--trainer.callbacks.metric={space.metric}",
        ]
        shown_params = ", ".join(f"{key}={format_value(value)}" for key, value in params.items())
        print(f"Trial {trial.number}: {shown_params}", flush=True)
        # A tracker preset (configs/loggers/) groups the trials by study: kit/trackers.py.
        # The trial runs as on any machine, without SLURM's variables: this worker answers to SLURM
        # (its signal, the requeue), and Lightning would take a DDP trial's processes for srun's.
        env = {
            **{name: value for name, value in os.environ.items() if not name.startswith("SLURM_")},
            trackers.SWEEP_STUDY: args.study,
            trackers.SWEEP_TRIAL: str(trial.number),
            trackers.SWEEP_ROOT: str(Path(root_dir).resolve()),
        }
        try:
            state, best = run_trial(
                study, trial, command, metrics, folder / "output.log", env, lambda: preemption.requested
            )
        except KeyboardInterrupt:  # the trial was stopped too; rerun the command to go on
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            print(f"\nSweep interrupted: trial {trial.number} marked failed. Rerun the command to continue.")
            return 130
        if state == "stopped":  # left running in the study: this job resumes it when requeued
            print(f"Trial {trial.number}: stopped, last.ckpt saved; it resumes when this job restarts.")
            return preemption.requeue()
        if state == "complete":
            study.tell(trial, best)
        else:
            pruned = state == "pruned"
            study.tell(
                trial, state=optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.FAIL
            )
        shown = "" if best is None else f" ({space.metric} {best:.4f})"
        print(f"Trial {trial.number}: {state}{shown}; output in {folder / 'output.log'}", flush=True)
    print(summary(study))
    if ranking := importances(study):
        print(ranking)
    best_yaml = write_best(study, study_dir, root_dir)
    if best_yaml is not None:
        print(f"Best trial's config: {best_yaml} (python main.py fit -c {best_yaml})")
    return 0


def worker_seed(seed: int | None, trials_so_far: int = 0) -> int | None:
    """The sampler's seed for this worker, from the space's seed and where the worker stands.

    A new study on one worker takes the space's seed as it is. A study started again draws
    another from the trials it holds, or it would suggest its first trials' settings again; so do
    the tasks of a SLURM job array (`scripts/sweep.sbatch`), from their task id and restart count,
    or they would all suggest the same ones.
    """
    if seed is None:
        return None
    task = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    where = (trials_so_far, task, int(os.environ.get("SLURM_RESTART_COUNT", "0")))
    if where == (0, 0, 0):
        return seed
    return int(numpy.random.SeedSequence([seed, *where]).generate_state(1)[0])


def newest_last_checkpoint(folder: Path) -> Path | None:
    """The trial's `last.ckpt` to resume from (its run folders are under `folder`)."""
    found = sorted(folder.rglob("last.ckpt"), key=lambda path: path.stat().st_mtime)
    return found[-1].resolve() if found else None


def counted_states() -> tuple[Any, ...]:
    """Trials that count towards --n_trials: done, pruned or under way (failed ones are retried)."""
    from optuna.trial import TrialState

    return (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
