"""Make the Trainer agree with torchrun when torchrun started this process.

torchrun starts the processes itself (N per node, on M nodes) and tells each one the world
size in environment variables. Lightning only joins them into one run when `devices`,
`num_nodes` and `strategy` say the same; left at their defaults, every process would train
alone on the whole data set, silently. So: settings left at their defaults follow torchrun,
and settings that contradict it stop the run with a message saying what to change.
"""

import os
import subprocess
from dataclasses import dataclass
from typing import Any

import torch.distributed

from .errors import KitError

# Strategies that start processes themselves, or run only one: wrong under a launcher that did.
_OWN_PROCESSES = ("spawn", "fork", "notebook")
_SINGLE_PROCESS = ("single_device", "single_xla", "single_tpu")


@dataclass(frozen=True)
class Launch:
    """The processes torchrun started: `processes_per_node` on each of `num_nodes` nodes."""

    world_size: int
    processes_per_node: int

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.processes_per_node


class LaunchMismatchError(KitError):
    """The Trainer settings contradict the processes torchrun started."""


def detect_launch() -> Launch | None:
    """torchrun's world, read from the variables it sets; None when torchrun did not start us.

    Lightning's own DDP launcher sets WORLD_SIZE too, for the processes it starts; only
    torchrun sets TORCHELASTIC_RUN_ID, which `is_torchelastic_launched` checks.
    """
    if not torch.distributed.is_torchelastic_launched():
        return None
    world_size = int(os.environ["WORLD_SIZE"])
    return Launch(world_size, int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))


def match_launch(trainer: Any, launch: Launch) -> str:
    """Set `trainer.devices/num_nodes/strategy` (the parsed `trainer` config) to fit `launch`.

    Returns a line saying what was set. Raises LaunchMismatchError when an explicit setting
    contradicts the launcher.
    """
    per_node, nodes = launch.processes_per_node, launch.num_nodes
    started = f"torchrun started {launch.world_size} processes ({per_node} per node on {nodes} node(s))"

    requested = device_count(trainer.devices)
    if requested is None:
        trainer.devices = per_node
    elif requested != per_node:
        raise LaunchMismatchError(
            f"{started}, but --trainer.devices={trainer.devices} asks for {requested} per node. Leave "
            f"--trainer.devices at auto to follow torchrun, or set it to {per_node}."
        )

    # num_nodes has no `auto`: its default, 1, is read as "not set".
    if trainer.num_nodes == 1:
        trainer.num_nodes = nodes
    elif trainer.num_nodes != nodes:
        raise LaunchMismatchError(
            f"{started}, but --trainer.num_nodes={trainer.num_nodes}. Leave it out to follow torchrun, "
            f"or set it to {nodes}."
        )

    strategy = trainer.strategy
    starts_its_own = isinstance(strategy, str) and any(word in strategy for word in _OWN_PROCESSES)
    if starts_its_own or (launch.world_size > 1 and strategy in _SINGLE_PROCESS):
        raise LaunchMismatchError(
            f"{started}, but --trainer.strategy={strategy} cannot join them. Use ddp (or leave it at auto); "
            "torchrun already started the processes."
        )
    if strategy == "auto" and launch.world_size > 1:
        trainer.strategy = "ddp"

    return (
        f"{started}: training with --trainer.devices={trainer.devices} "
        f"--trainer.num_nodes={trainer.num_nodes} --trainer.strategy={trainer.strategy}"
    )


def device_count(devices: Any) -> int | None:
    """How many devices `--trainer.devices` asks for per node; None for `auto` or -1 (all)."""
    if isinstance(devices, str):
        if devices.strip() in ("auto", "-1"):
            return None
        if "," in devices:
            return len([index for index in devices.split(",") if index.strip()])
        return int(devices)
    if isinstance(devices, (list, tuple)):
        return len(devices)
    return None if devices in (None, -1) else int(devices)


def slurm_job_id() -> str | None:
    """This SLURM job (`ARRAYJOB_TASK` for a task of a job array), None outside SLURM. A requeued
    job keeps it; its PIDs, and maybe its node, change."""
    array_job, array_task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{array_task}" if array_job and array_task else os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job() -> str:
    """Put this SLURM job back in the queue (`scontrol requeue`); a line saying how it went."""
    job = slurm_job_id()
    if not job:
        return "Not requeued: no SLURM_JOB_ID (not a SLURM job)."
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"Not requeued: `scontrol requeue {job}` failed ({error}); resubmit with --ckpt_path=last."
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[:1]
        return f"Not requeued: `scontrol requeue {job}` exited {result.returncode} {detail}."
    return f"Requeued SLURM job {job}: it resumes from last.ckpt when it starts again."
