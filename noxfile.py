"""Checks for the template itself: `nox -l` lists the sessions, `nox` runs the default ones.

The project sessions (cpu, kit, ddp_cpu, slurm, gpu, ddp) render a project and run the session of
the same name from the generated project's own noxfile, so the template is tested exactly
as its users meet it. How torch gets installed (TORCH_BUILD, TORCH_VERSION,
TORCH_INDEX_URL) is explained at the top of `{{cookiecutter.project_slug}}/noxfile.py`.
"""

import importlib.util
import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
TEMPLATE_TOOLS = ["cookiecutter>=2.6", "pyyaml", "cruft>=2.15"]

nox.options.sessions = ["lint", "typecheck", "tests", "cpu", "kit", "ddp_cpu", "slurm", "gpu", "ddp"]
nox.options.default_venv_backend = "uv|virtualenv"  # uv where installed: installs in seconds
# uv leaves installed modules uncompiled, where pip compiles them: where Python may not write
# bytecode (PYTHONDONTWRITEBYTECODE, as on CI machines) every process the tests start then
# compiles torch and Lightning again, and the sessions took twice as long.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def render(session: nox.Session, **context: str) -> Path:
    """Render the template with defaults (plus `context`) into a fresh temp folder."""
    output = Path(session.create_tmp()) / "rendered"
    session.run(
        "python", "-c", f"import shutil; shutil.rmtree({str(output)!r}, ignore_errors=True)", silent=True
    )
    settings = [f"{key}={value}" for key, value in context.items()]
    session.run("cookiecutter", "--no-input", "--output-dir", str(output), str(ROOT), *settings, silent=True)
    (project,) = output.iterdir()
    return project


def torch_build(project: Path):
    """A rendered project's torch_build.py (standard library only), loaded by path."""
    (path,) = project.glob("src/*/kit/torch_build.py")
    spec = importlib.util.spec_from_file_location("torch_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_project_session(session: nox.Session, name: str, min_gpus: int = 0) -> None:
    session.install("nox[uv]", *TEMPLATE_TOOLS)  # the project's own nox installs with uv too
    project = render(session)
    gpus = torch_build(project).nvidia_gpu_count()
    if gpus < min_gpus:
        session.skip(f"needs {min_gpus} NVIDIA GPU(s); nvidia-smi found {gpus}")
    with session.chdir(project):
        session.run("nox", "--no-reuse-existing-virtualenvs", "-s", name, "--", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff over the template's own code and over a freshly rendered project."""
    session.install("ruff", *TEMPLATE_TOOLS)
    session.run("ruff", "check", "hooks", "tests", "noxfile.py", "benchmarks")
    session.run("ruff", "format", "--check", "hooks", "tests", "noxfile.py", "benchmarks")
    project = render(session)
    # The project sits under .nox/, which this repository's .gitignore lists: without
    # --no-respect-gitignore ruff would skip every file and pass.
    with session.chdir(project):
        seen = session.run("ruff", "check", "--no-respect-gitignore", "--show-files", ".", silent=True)
        if "main.py" not in (seen or ""):
            session.error(f"ruff found none of the rendered project's files in {project}")
        session.run("ruff", "check", "--no-respect-gitignore", ".")
        session.run("ruff", "format", "--check", "--no-respect-gitignore", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the template's hooks, then a rendered project's own typecheck session."""
    session.install("mypy", *TEMPLATE_TOOLS)
    session.run("mypy", "--ignore-missing-imports", "hooks")
    run_project_session(session, "typecheck")


@nox.session
def tests(session: nox.Session) -> None:
    """The template's tests: prompts, hooks, every option, and the example really learns."""
    # A rendered project must pass its own lint (test_team_files runs ruff).
    session.install("pytest", "ruff", *TEMPLATE_TOOLS)
    project = render(session)
    builds = torch_build(project)
    version = os.environ.get("TORCH_VERSION", builds.TESTED_TORCH_VERSION)
    build = os.environ.get("TORCH_BUILD", "cpu")
    session.install(*builds.pip_requirement(build, version, os.environ.get("TORCH_INDEX_URL")))
    # The generated project's dependencies, and the extras the regression example's tests use
    # (every extra's own tests run in the cpu session).
    session.install("-e", f"{project}[sweep,export,serve,test]")
    # The tests install rendered projects with `python -m pip`, which a uv-made venv lacks.
    session.install("pip")
    # Test files side by side (pytest-xdist, from the project's test extra), each whole on one
    # worker: a file's rendered projects are installed into this one environment in turn. One
    # torch thread per process, as in the project's own sessions (its noxfile says why).
    session.env["OMP_NUM_THREADS"] = "1"
    side_by_side = ("--numprocesses=auto", "--maxprocesses=4", "--dist=loadfile")
    session.run("pytest", *side_by_side, "tests", *session.posargs)


@nox.session
def cpu(session: nox.Session) -> None:
    """Render a project; install it with every extra; run the example's tests (DDP aside) on the CPU."""
    run_project_session(session, "cpu")


@nox.session
def kit(session: nox.Session) -> None:
    """Render a project; the kit's own tests on a copy of it without the example's code."""
    run_project_session(session, "kit")


@nox.session
def ddp_cpu(session: nox.Session) -> None:
    """Render a project; DDP on the CPU with 2 processes (gloo), plus a 2-node torchrun."""
    run_project_session(session, "ddp_cpu")


@nox.session
def slurm(session: nox.Session) -> None:
    """Render a project; its sbatch script on a one-node SLURM cluster on this machine (root; else skips)."""
    run_project_session(session, "slurm")


@nox.session
def gpu(session: nox.Session) -> None:
    """Render a project; its tests and a short fit/test on one GPU (skips without one)."""
    run_project_session(session, "gpu", min_gpus=1)


@nox.session
def ddp(session: nox.Session) -> None:
    """Render a project; DDP fit/test across 2+ GPUs (skips with fewer)."""
    run_project_session(session, "ddp", min_gpus=2)
