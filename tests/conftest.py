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
