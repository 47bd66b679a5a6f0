"""Keep only the chosen licence as LICENSE, then tell the user how to start.

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
TORCH_INDEX = "https://download.pytorch.org/whl"


def keep_chosen_license(project_dir: Path, license_name: str) -> None:
    """The template ships every licence text; the project must carry exactly the chosen one."""
    chosen = project_dir / LICENSES_DIR / f"{license_name}.txt"
    chosen.replace(project_dir / "LICENSE")
    shutil.rmtree(project_dir / LICENSES_DIR)


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
        "uv sync --extra dev && uv run main.py fit"
    )
    return "\n".join(
        ["", f"Created {project_dir.name}. Next steps (in a fresh virtual environment):", *lines, with_uv]
    )


def main() -> int:
    answers = json.loads(RENDERED_ANSWERS)
    project_dir = Path.cwd()
    keep_chosen_license(project_dir, answers["license"])
    print(next_steps(project_dir, answers["torch_build"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
