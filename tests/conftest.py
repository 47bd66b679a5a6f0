"""Helpers to render the template the two ways users do: cookiecutter's Python API and its CLI."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
# cookiecutter.json is the one source of the supported Pythons and torch builds; tests read it.
TEMPLATE_CHOICES = json.loads((TEMPLATE_ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
PYTHON_VERSIONS = TEMPLATE_CHOICES["_python_versions"]
TORCH_BUILDS = TEMPLATE_CHOICES["torch_build"]
COOKIECUTTER_CLI = Path(sys.executable).parent / "cookiecutter"


@pytest.fixture(autouse=True, scope="session")
def isolated_cookiecutter_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep cookiecutter's replay files and repo cache out of the user's home during tests.

    Cookiecutter reads COOKIECUTTER_CONFIG both in-process and in the CLI subprocesses.
    """
    state = tmp_path_factory.mktemp("cookiecutter-state")
    config = state / "config.yaml"
    config.write_text(f"cookiecutters_dir: {state / 'cookiecutters'}\nreplay_dir: {state / 'replay'}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COOKIECUTTER_CONFIG", str(config))
        yield


def render(output_dir: Path, **context: str) -> Path:
    """Render the template without prompts into output_dir and return the generated project folder."""
    project = cookiecutter(
        str(TEMPLATE_ROOT), no_input=True, output_dir=str(output_dir), extra_context=context
    )
    return Path(project)


def render_cli(output_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `cookiecutter` command a user types, with key=value answers; output is captured."""
    command = [str(COOKIECUTTER_CLI), "--no-input", "--output-dir", str(output_dir), str(TEMPLATE_ROOT)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, check=False)


def run(
    *command: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; a failure shows the end of its output."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def pip_install(project: Path, python_version: str) -> None:
    """Editable install without dependencies: the test environment already has them."""
    flags = ["--no-deps", "--quiet"]
    if tuple(map(int, python_version.split("."))) > sys.version_info[:2]:
        # The code is identical for every Python choice; only the declared minimum differs,
        # and this machine's torch wheel exists for the running Python alone.
        flags.append("--ignore-requires-python")
    run(sys.executable, "-m", "pip", "install", *flags, "-e", project, cwd=project)
