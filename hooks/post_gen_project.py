"""Put the chosen example's files in place, keep only the chosen licence, then tell the user how to start.

Cookiecutter renders this file with Jinja and runs it inside the generated project folder.
"""

import json
import shlex
import shutil
import sys
from pathlib import Path

# The answers arrive as JSON inside a raw string, so quotes or backslashes in them cannot break
# this script. Imported without rendering (by tests), the string is just the Jinja placeholder.
RENDERED_ANSWERS = r"""{{ cookiecutter | tojson }}"""

LICENSES_DIR = Path("licenses")
# The project's files are the image classifier's; each other task's folder here holds the files
# that replace them (same paths) and REMOVED, the classifier's files that have no counterpart.
TASKS_DIR = Path("_tasks")
TORCH_INDEX = "https://download.pytorch.org/whl"


def keep_chosen_license(project_dir: Path, license_name: str) -> None:
    """The template ships every licence text; the project must carry exactly the chosen one."""
    chosen = project_dir / LICENSES_DIR / f"{license_name}.txt"
    chosen.replace(project_dir / "LICENSE")
    shutil.rmtree(project_dir / LICENSES_DIR)


def apply_task(project_dir: Path, task: str) -> None:
    """Lay the chosen task's files over the classifier's, drop those it lists, and the folder."""
    overlay = project_dir / TASKS_DIR / task
    if overlay.is_dir():
        removed = overlay / "REMOVED"
        for name in removed.read_text(encoding="utf-8").split() if removed.is_file() else []:
            (project_dir / name).unlink()
        removed.unlink(missing_ok=True)
        for source in sorted(path for path in overlay.rglob("*") if path.is_file()):
            target = project_dir / source.relative_to(overlay)
            target.parent.mkdir(parents=True, exist_ok=True)
            source.replace(target)
    shutil.rmtree(project_dir / TASKS_DIR)


def next_steps(project_dir: Path, torch_build: str) -> str:
    """The commands a new user needs, in order: torch first, because pip alone would pick a build
    (uv takes the chosen one from pyproject.toml)."""
    commands = [
        (f"cd {shlex.quote(str(project_dir))}", ""),
        (f"pip install torch --index-url {TORCH_INDEX}/{torch_build}", f"the {torch_build} build of PyTorch"),
        ('pip install -e ".[dev]"', "this project, with its test and lint tools"),
        ("python main.py fit", "train"),
        ("python main.py test --ckpt_path=best", "test the best checkpoint"),
        ("tensorboard --logdir logs", "watch the curves"),
        ("pytest", "run the project's tests"),
    ]
    width = max(len(command) for command, why in commands if why)
    lines = [f"  {command.ljust(width)}  # {why}" if why else f"  {command}" for command, why in commands]
    with_uv = (
        f"Or with uv (pip install uv), torch's {torch_build} build included: "
        "uv sync --compile-bytecode --extra dev && uv run main.py fit"
    )
    return "\n".join(
        ["", f"Created {project_dir.name}. Next steps (in a fresh virtual environment):", *lines, with_uv]
    )


def main() -> int:
    answers = json.loads(RENDERED_ANSWERS)
    project_dir = Path.cwd()
    apply_task(project_dir, answers["task"])
    keep_chosen_license(project_dir, answers["license"])
    print(next_steps(project_dir, answers["torch_build"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
