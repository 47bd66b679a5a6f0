"""Projects made with cruft take template updates: `cruft create`, a template change, `cruft update`.

The template is copied from this working tree (committed or not) into a fresh git repository,
so the test sees exactly the files being developed, never an older commit.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE_ROOT

CRUFT = Path(sys.executable).parent / "cruft"
# Commits need an author; signing (if the user's git config asks for it) must not prompt.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Template Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Template Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def run(
    *command: str | Path, cwd: Path, check: bool = True, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**os.environ, **GIT_IDENTITY, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def commit_all(repo: Path, message: str) -> None:
    run("git", "add", "-A", cwd=repo)
    run("git", "-c", "commit.gpgsign=false", "commit", "-q", "-m", message, cwd=repo)


def copy_template_working_tree(destination: Path) -> Path:
    """Tracked and untracked-but-not-ignored files, as they are on disk now, in a new git repo."""
    listing = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=TEMPLATE_ROOT)
    for name in filter(None, listing.stdout.split("\0")):
        source = TEMPLATE_ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    run("git", "init", "-q", cwd=destination)
    commit_all(destination, "template v1")
    return destination


@pytest.mark.slow
def test_cruft_update_brings_a_template_change_into_a_project_and_keeps_the_users_own(tmp_path):
    if not CRUFT.exists():
        pytest.skip("cruft is not installed here: `pip install cruft` (the nox `tests` session installs it)")
    template = copy_template_working_tree(tmp_path / "template")
    run(CRUFT, "create", "--no-input", "--output-dir", tmp_path / "projects", template, cwd=tmp_path)
    project = tmp_path / "projects" / "digits-classifier"
    assert (project / ".cruft.json").is_file(), "cruft records the template and its commit"
    run("git", "init", "-q", cwd=project)
    commit_all(project, "generated")
    assert run(CRUFT, "check", cwd=project, check=False).returncode == 0

    # The template moves on (a rendered line); the team changes its own config meanwhile.
    readme = template / "{{cookiecutter.project_slug}}" / "README.md"
    readme.write_text(readme.read_text() + "\nKept up to date with cruft: {{ cookiecutter.project_name }}.\n")
    commit_all(template, "template v2")
    config = project / "configs" / "default.yaml"
    config.write_text(config.read_text().replace("max_epochs: 30", "max_epochs: 40", 1))
    commit_all(project, "train longer")
    assert run(CRUFT, "check", cwd=project, check=False).returncode != 0, "the project is behind"

    run(CRUFT, "update", "--skip-apply-ask", "--allow-untracked-files", cwd=project)
    assert (project / "README.md").read_text().endswith("\nKept up to date with cruft: Digits Classifier.\n")
    assert "max_epochs: 40" in config.read_text(), "the team's own change survives the update"
    assert run(CRUFT, "check", cwd=project, check=False).returncode == 0

    # The updated project still trains (its tests run in CI's cpu session, on a fresh render).
    # PYTHONPATH: this project's code, not that of another rendered copy installed in the environment.
    one_batch = ["main.py", "fit", "--trainer.fast_dev_run=true", "--trainer.enable_progress_bar=false"]
    run(sys.executable, *one_batch, cwd=project, timeout=300, PYTHONPATH=str(project / "src"))
