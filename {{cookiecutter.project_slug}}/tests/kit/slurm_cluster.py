"""A throwaway one-node SLURM cluster on this machine, for the tests that need a real scheduler.

`running(folder)` installs Debian's `slurm-wlm` and `munge` where they are missing (as root,
with apt-get, and only when SLURM_TESTS_INSTALL=1, as `nox -s slurm` sets it), writes a
configuration under `folder`, starts `munged`, `slurmctld` and `slurmd` for this machine only,
and stops them (by the PIDs it started) however the block ends. Where that cannot be done it
raises `ClusterSetupError`, whose message says why: the tests skip with it. Commands run with
`cluster.env` reach this cluster and no other.

A requeued job waits `cred_expire` seconds (SLURM's default: 120) before it may start again;
this cluster sets 5, and schedules every 2 s, so a requeue restarts within seconds.
"""

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CPUS = 2  # the node's size: a 2-task job fills it


class ClusterSetupError(Exception):
    """SLURM cannot be set up here; the message says why."""


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]
    pids: list[int] = field(default_factory=list)

    def run(
        self, *command: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A SLURM command (sbatch, scontrol, ...) against this cluster; `env` must hold SLURM_CONF."""
        result = subprocess.run(
            command, env=env or self.env, cwd=self.folder, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, RestartCnt, ExitCode, ...); {} once it is purged."""
        result = self.run("scontrol", "show", "job", "--oneliner", job_id, check=False)
        if result.returncode != 0:
            return {}
        return dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)


def installed() -> bool:
    return all(shutil.which(name, path=f"{os.environ['PATH']}:/usr/sbin") for name in DAEMONS)


def install_if_missing() -> None:
    """apt-get slurm-wlm and munge, once: pytest-xdist's workers take turns (apt allows one)."""
    if installed():
        return
    with (Path(tempfile.gettempdir()) / "kit-slurm-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed():  # unless the worker before this one did it
            install()


def install() -> None:
    if os.environ.get("SLURM_TESTS_INSTALL") != "1":
        raise ClusterSetupError("slurm-wlm and munge are not installed (nox -s slurm installs them, as root)")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ClusterSetupError(
            "slurm-wlm and munge are not installed, and installing them needs root and apt-get"
        )
    apt = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        result = subprocess.run(command, env=apt, capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterSetupError(f"{' '.join(command)} failed: {result.stderr.strip()[-300:]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def first_job_id() -> int:
    """Job IDs of their own for the clusters of pytest-xdist's workers (gw0: 1, gw1: 1001, ...):
    Lightning derives a SLURM job's DDP port from its ID (15000 + its last 4 digits), and two
    clusters both numbering from 1 would start their first jobs on one port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return 1 + 1000 * (int(worker) if worker.isdigit() else 0)


def write_config(folder: Path, node: str) -> Path:
    """slurm.conf for one node, `node`, that is its own controller; everything under `folder`."""
    for name in ("state", "spool"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    config = folder / "slurm.conf"
    config.write_text(
        f"""ClusterName=kittests
FirstJobId={first_job_id()}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket={folder / "munge.socket"},cred_expire=5
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "slurmctld.log"}
SlurmdLogFile={folder / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobRequeue=1
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN
PartitionName=local Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
    )
    return config


def start_munge(folder: Path) -> list[str]:
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return [
        "munged",
        "--force",  # root, and a key folder others may read: fine for a throwaway cluster
        f"--key-file={key}",
        f"--socket={folder / 'munge.socket'}",
        f"--pid-file={folder / 'munged.pid'}",
        f"--log-file={folder / 'munged.log'}",
        f"--seed-file={folder / 'munge.seed'}",
        "--foreground",
    ]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise ClusterSetupError(f"{what} after {timeout:.0f} s")


@contextlib.contextmanager
def running(folder: Path) -> Iterator[Cluster]:
    """This machine as a one-node SLURM cluster while the block runs; see the module docstring."""
    install_if_missing()
    if os.geteuid() != 0:
        raise ClusterSetupError("a throwaway cluster runs its daemons as root (SlurmUser=root)")
    node = socket.gethostname().split(".")[0]
    config = write_config(folder, node)
    env = {**os.environ, "SLURM_CONF": str(config), "PATH": f"{os.environ['PATH']}:/usr/sbin"}
    cluster = Cluster(folder, env)
    commands = [
        start_munge(folder),
        ["slurmctld", "-D", "-i", "-f", str(config)],  # -i: no state from an earlier cluster
        ["slurmd", "-D", "-f", str(config), "-N", node],
    ]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            log = (folder / f"{command[0]}.out").open("wb")
            processes.append(
                subprocess.Popen(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
            cluster.pids.append(processes[-1].pid)
            if command[0] == "munged":
                wait_for((folder / "munge.socket").exists, 30, "munged made no socket")

        def node_idle() -> bool:
            for process in processes:
                if process.poll() is not None:
                    name = process.args[0]  # type: ignore[index]
                    tail = (folder / f"{name}.out").read_text(errors="replace")[-500:]
                    raise ClusterSetupError(f"{name} exited {process.returncode}: {tail}")
            state = cluster.run("sinfo", "--noheader", "--format=%t", check=False).stdout.strip()
            return state in ("idle", "mix", "alloc")

        wait_for(node_idle, 60, "the node did not come up")
        yield cluster
    finally:
        with contextlib.suppress(Exception):  # jobs first, while slurmd can still end them
            cluster.run("scancel", "--full", f"--user={os.getuid()}", check=False)
            wait_for(lambda: not cluster.run("squeue", "--noheader", check=False).stdout.strip(), 30, "jobs")
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
