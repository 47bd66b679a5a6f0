"""Find or render the generated project the benchmarks measure, and make it importable."""

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TEMPLATE_DIR = Path(__file__).resolve().parents[1]


def render_project(output_dir: Path) -> Path:
    """Render the template with its default answers into `output_dir`; return the project folder."""
    before = set(output_dir.iterdir()) if output_dir.exists() else set()
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(output_dir), str(TEMPLATE_DIR)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    (project,) = set(output_dir.iterdir()) - before
    return project


def package_name(project: Path) -> str:
    """The project's import name: the one package under `src/`."""
    packages = [path.name for path in (project / "src").iterdir() if (path / "__init__.py").exists()]
    if len(packages) != 1:
        raise SystemExit(f"error: expected one package under {project / 'src'}, found {packages or 'none'}.")
    return packages[0]


def project_env(project: Path) -> dict[str, str]:
    """The environment for subprocesses: the project's `src/` importable even when not installed."""
    paths = [str(project / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def import_module(project: Path, module: str) -> ModuleType:
    """Import `<package>.<module>` of the project in this process."""
    src = str(project / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return importlib.import_module(f"{package_name(project)}.{module}")


def check_project(project: Path) -> Path:
    """`project` resolved, or a one-line error when it is not a generated project."""
    project = project.resolve()
    if not (project / "main.py").is_file() or not (project / "src").is_dir():
        raise SystemExit(
            f"error: {project} is not a generated project (no main.py and src/). Pass --project=DIR."
        )
    return project
