"""Checks for this project, one nox session each: `nox -l` lists them, `nox` runs them all.

Each session installs torch first, in the build it needs, so pip never falls back to the
default PyPI wheel (a multi-GB CUDA build on Linux, even on machines without a GPU):
- `TORCH_BUILD`: cpu, cu126, cu128, cu130. Default: this project's build for CPU sessions;
  for GPU sessions, this project's build when the driver runs it, else the newest CUDA build
  the driver runs (read from nvidia-smi).

GPU sessions skip, saying why, when nvidia-smi lists no GPU (before installing anything) or
when the installed torch sees too few (`CUDA_VISIBLE_DEVICES`, MIG, a CPU-only build).
- `TORCH_VERSION`: the torch release; default the one this project is tested with. The
  build label is part of the pin (`torch==2.13.0+cpu`), so no other variant can slip in.
- `TORCH_INDEX_URL`: where torch comes from; default PyTorch's index for the build. Set it
  empty (`TORCH_INDEX_URL= nox`) to use the installer's own configuration: a mirror or a
  wheelhouse. Sessions install with uv where it is installed (seconds instead of minutes), else
  with pip; uv does not read pip's configuration, so hand it the same sources through its own
  variables (`UV_FIND_LINKS`, `UV_INDEX_URL`, `UV_EXTRA_INDEX_URL`).
"""

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import nox

ROOT = Path(__file__).parent
PACKAGE = "{{ cookiecutter.package_name }}"

nox.options.sessions = ["lint", "typecheck", "cpu", "kit", "ddp_cpu", "slurm", "gpu", "ddp"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "uv|virtualenv"  # uv where installed: installs in seconds
# uv leaves installed modules uncompiled, where pip compiles them: where Python may not write
# bytecode (PYTHONDONTWRITEBYTECODE, as on CI machines) every process the tests start then
# compiles torch and Lightning again, and the sessions took twice as long.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def _load_torch_build():
    """The project's torch_build.py, loaded by path: it needs nothing installed first."""
    spec = importlib.util.spec_from_file_location(
        "torch_build", ROOT / "src" / PACKAGE / "kit" / "torch_build.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


torch_build = _load_torch_build()


def install(session: nox.Session, build: str, project: str = ".[all,test]") -> None:
    """torch in exactly this build first (see the module docstring), then the project.

    `.[all,test]` brings every optional extra, so that the tests of sweeps, trackers, export and
    serving run; sessions that need none of them install less (the extras are large).
    """
    version = os.environ.get("TORCH_VERSION", torch_build.TESTED_TORCH_VERSION)
    session.install(*torch_build.pip_requirement(build, version, os.environ.get("TORCH_INDEX_URL")))
    session.install("-e", project)
    session.run("python", "-c", "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)")


def gpu_build() -> str:
    chosen = os.environ.get("TORCH_BUILD") or torch_build.suggested_build(torch_build.driver_cuda())
    if chosen is None:
        raise SystemExit("This NVIDIA driver runs none of the CUDA builds of torch: update the driver.")
    return chosen


def gpu_session(session: nox.Session, needed: int) -> int:
    """Install the GPU build and return how many GPUs torch sees; skip, saying why, if too few."""
    listed = torch_build.nvidia_gpu_count()
    if listed < needed:  # checked first: no multi-GB CUDA wheel for a machine without GPUs
        session.skip(f"needs {needed} NVIDIA GPU(s); nvidia-smi lists {listed} (or did not answer in time)")
    install(session, gpu_build())
    output = session.run("python", "-c", torch_build.VISIBLE_GPUS_CODE, silent=True) or "0"
    visible = int(output.strip().splitlines()[-1])
    if visible < needed:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f"CUDA_VISIBLE_DEVICES={hidden!r}" if hidden is not None else "MIG, driver or torch build"
        session.skip(f"needs {needed} GPU(s); torch sees {visible} of the {listed} listed ({why})")
    return visible


def pytest_side_by_side(session: nox.Session, *args: str, **kwargs: Any) -> None:
    """pytest with tests side by side (pytest-xdist): one worker per core, at most 4, and an idle
    worker takes tests queued for a busy one. A file's shared fixtures (a trained run, a server)
    are made once per worker that runs its tests.

    Each process that the tests start then gets one torch thread (as torchrun gives each rank):
    two threads per process on cores all busy spin-wait on each other, and a suite took half as
    long again in CPU time.
    """
    session.env["OMP_NUM_THREADS"] = "1"
    side_by_side = ("--numprocesses=auto", "--maxprocesses=4", "--dist=worksteal")
    session.run("pytest", *side_by_side, *args, *session.posargs, **kwargs)


def cpu_build() -> str:
    return os.environ.get("TORCH_BUILD") or torch_build.TORCH_BUILD


def short_run(session: nox.Session, *flags: str) -> None:
    """Train briefly, then test the best checkpoint, through main.py as a user would."""
    logs = session.create_tmp()
    common = [f"--trainer.default_root_dir={logs}", "--trainer.enable_progress_bar=false", *flags]
    session.run("python", "main.py", "fit", "--trainer.max_epochs=2", *common)
    session.run("python", "main.py", "test", "--ckpt_path=best", *common)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the package, kit included (settings in pyproject.toml)."""
    install(session, cpu_build(), ".[test]")  # optional extras' modules are typed as Any
    session.install("mypy")
    session.run("mypy", "src")


@nox.session
def cpu(session: nox.Session) -> None:
    """Your project's CPU tests (main.py fit, test, predict... as a user runs them), DDP aside."""
    install(session, cpu_build())
    # Every extra's tests run: one that cannot import its extra fails rather than skips.
    session.env["KIT_TESTS_NEED_EXTRAS"] = "1"
    # DDP tests run in ddp_cpu, SLURM's in slurm, the kit's in kit.
    ignored = ("--ignore=tests/test_distributed.py", "--ignore=tests/test_slurm.py", "--ignore=tests/kit")
    pytest_side_by_side(session, "-m", "not gpu", *ignored)


# Your code: every module of the package outside kit/ (but its __init__.py), and main.py.
def without_your_code(session: nox.Session) -> Path:
    """A copy of this project with your modules deleted: what the kit's tests must pass on."""
    copy = Path(session.create_tmp()) / "kit-alone"
    shutil.rmtree(copy, ignore_errors=True)
    skipped = shutil.ignore_patterns(".nox", ".git", "logs", "lightning_logs", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT, copy, ignore=skipped)
    package = copy / "src" / PACKAGE
    for module in [copy / "main.py", *package.glob("*.py")]:
        if module.name != "__init__.py":
            module.unlink()
    return copy


@nox.session
def kit(session: nox.Session) -> None:
    """The kit's own tests (tests/kit), on a copy of this project without your code: they pass
    whatever your model, data and CLI hold (modules shaped unlike yours included: `hf`)."""
    install(session, cpu_build(), ".[all,test,hf]")
    session.env["KIT_TESTS_NEED_EXTRAS"] = "1"
    copy = without_your_code(session)
    with session.chdir(copy):
        # The long stress test of stops runs on request: `nox -s kit -- -m stress` (the last -m wins).
        pytest_side_by_side(
            session,
            "-m",
            "not gpu and not stress",
            "tests/kit",
            env={"PYTHONPATH": str(copy / "src")},  # the copy's package, not the installed one
        )


@nox.session
def ddp_cpu(session: nox.Session) -> None:
    """DDP on the CPU: 2 processes over gloo, the same code path as multi-GPU DDP."""
    install(session, cpu_build(), ".[test]")
    pytest_side_by_side(session, "tests/test_distributed.py", "-m", "not gpu")


@nox.session
def slurm(session: nox.Session) -> None:
    """scripts/slurm.sbatch on a one-node SLURM cluster this session starts (as root; else skips)."""
    if not Path("tests/test_slurm.py").is_file():
        session.skip("no tests/test_slurm.py: the template tests the SLURM path on its classifier example")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:  # checked first: nothing installed for a skip
        session.skip("needs root: the tests start SLURM's daemons (and install slurm-wlm, munge) as root")
    install(session, cpu_build(), ".[sweep,test]")
    # Where slurm-wlm and munge are missing, the tests install them (root and apt-get only).
    session.env["SLURM_TESTS_INSTALL"] = "1"
    session.env["OMP_NUM_THREADS"] = "1"  # a torch thread per rank, as torchrun sets it (jobs inherit it)
    # Two workers, each with a throwaway cluster of its own: the tests mostly wait on the scheduler.
    session.run("pytest", "-n", "2", "--dist=loadgroup", "tests/test_slurm.py", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """GPU tests and a short fit/test on one GPU (skipped without one)."""
    gpu_session(session, needed=1)
    session.run("pytest", "-m", "gpu", *session.posargs)
    short_run(session, "-c", "configs/presets/gpu.yaml")


@nox.session
def ddp(session: nox.Session) -> None:
    """DDP across 2+ GPUs: short fit/test (skipped with fewer than 2 GPUs)."""
    gpus = gpu_session(session, needed=2)
    short_run(session, "-c", "configs/presets/ddp.yaml", f"--trainer.devices={gpus}")
