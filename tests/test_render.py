"""Every answer a user can give renders a complete project: names, licence and Python version land
where they belong, and no Jinja is left behind."""

import importlib.util
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
import tomllib
from conftest import PYTHON_VERSIONS, TORCH_BUILDS, render

DEFAULT_SLUG = "digits-classifier"
DEFAULT_PACKAGE = "digits_classifier"

# Left-over template syntax: an unrendered `{{`/`{%`, or a placeholder whose opening brace was mistyped.
# A lone `}}` is not flagged: nested dicts in Python and YAML end that way. GitHub Actions writes its
# own expressions as `${{ ... }}`; those are legitimate in workflow files only.
JINJA_MARKER = re.compile(r"\{\{|\{%|cookiecutter\.\w+\s*\}")
GITHUB_EXPRESSION = re.compile(r"\$\{\{.*?\}\}")
# Placing tensors by hand (`.cuda()`, `device="cuda"`, `torch.device("cuda")`) breaks CPU and
# multi-GPU runs: in a generated project Lightning places the model and batches.
HARD_CODED_DEVICE = re.compile(r"""\.cuda\(|device\s*=\s*["']cuda|torch\.device\(\s*["']cuda""")

# A phrase from the body of each licence, so the test knows which text was kept.
LICENSE_PHRASES = {
    "MIT": "Permission is hereby granted, free of charge",
    "Apache-2.0": "Apache License\n                           Version 2.0, January 2004",
    "BSD-3-Clause": "Redistribution and use in source and binary forms",
    "Proprietary": "proprietary and confidential",
}


def text_files(project: Path) -> list[tuple[Path, str]]:
    """Every generated file that decodes as UTF-8, with its text (binary files are skipped)."""
    files = []
    for path in sorted(project.rglob("*")):
        if path.is_file():
            try:
                files.append((path, path.read_text(encoding="utf-8")))
            except UnicodeDecodeError:
                continue
    return files


def leftover_jinja(project: Path) -> list[str]:
    """`file:line: text` for each line that still holds template syntax."""
    leftovers = []
    for path, text in text_files(project):
        relative = path.relative_to(project)
        for number, line in enumerate(text.splitlines(), start=1):
            checked = GITHUB_EXPRESSION.sub("", line) if relative.parts[0] == ".github" else line
            if JINJA_MARKER.search(checked):
                leftovers.append(f"{relative}:{number}: {line.strip()}")
    return leftovers


def hard_coded_devices(project: Path) -> list[str]:
    """`file:line: text` for each line that places tensors on a CUDA device by hand."""
    return [
        f"{path.relative_to(project)}:{number}: {line.strip()}"
        for path, text in text_files(project)
        for number, line in enumerate(text.splitlines(), start=1)
        if HARD_CODED_DEVICE.search(line)
    ]


def assert_complete_project(project: Path, slug: str, package: str, python_version: str = "3.11") -> None:
    """What every rendering must get right, whatever the answers."""
    assert project.name == slug
    assert leftover_jinja(project) == []

    license_files = [
        path for path in project.rglob("*") if path.name.upper().startswith(("LICENSE", "LICENCE"))
    ]
    assert license_files == [project / "LICENSE"]
    assert not (project / "licenses").exists()
    assert not (project / "_tasks").exists()  # the other examples' files, laid over or dropped

    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["name"] == slug
    assert pyproject["project"]["requires-python"] == f">={python_version}"

    assert (project / "src" / package / "__init__.py").is_file()
    assert f"from {package}." in (project / "main.py").read_text(encoding="utf-8")
    for path, text in text_files(project):
        if path.suffix == ".py":
            compile(text, str(path), "exec")  # a rendered value must never break Python syntax
    assert hard_coded_devices(project) == [], "let Lightning place tensors: self.device, type_as, .to(...)"


def test_leftover_jinja_check_flags_template_syntax_but_not_github_expressions(tmp_path):
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text("ref: ${{ github.ref }}\n")
    (tmp_path / "ok.py").write_text("x = {'a': {'b': 1}}\n")
    (tmp_path / "bad.md").write_text(
        "# {{ cookiecutter.project_name }}\n{% if x %}\n# { cookiecutter.author }}\n"
    )
    (tmp_path / "bad.yml").write_text("ref: ${{ github.ref }}\n")

    assert leftover_jinja(tmp_path) == [
        "bad.md:1: # {{ cookiecutter.project_name }}",
        "bad.md:2: {% if x %}",
        "bad.md:3: # { cookiecutter.author }}",
        "bad.yml:1: ref: ${{ github.ref }}",
    ]


def test_hard_coded_device_check_flags_manual_placement_but_not_device_queries(tmp_path):
    (tmp_path / "bad.py").write_text(
        'x = x.cuda()\ny = torch.zeros(3, device="cuda")\nz = torch.device( "cuda", 0)\n'
    )
    (tmp_path / "ok.py").write_text(
        "x = x.to(self.device)\nif torch.cuda.is_available():\n    n = torch.cuda.device_count()\n"
    )

    assert hard_coded_devices(tmp_path) == [
        "bad.py:1: x = x.cuda()",
        'bad.py:2: y = torch.zeros(3, device="cuda")',
        'bad.py:3: z = torch.device( "cuda", 0)',
    ]


def test_defaults_render_a_complete_project(tmp_path):
    project = render(tmp_path)

    assert_complete_project(project, DEFAULT_SLUG, DEFAULT_PACKAGE)
    assert [path.name for path in tmp_path.iterdir()] == [DEFAULT_SLUG]


def test_custom_name_derives_folder_and_package_and_leaves_no_default_name_behind(tmp_path):
    project = render(tmp_path, project_name="My Cool Project")

    assert_complete_project(project, "my-cool-project", "my_cool_project")
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "My Cool Project" in readme
    hard_coded = [str(path) for path, text in text_files(project) if re.search(r"digits[-_]classifier", text)]
    assert hard_coded == []


def test_the_regression_task_puts_its_own_example_in_place_of_the_classifier(tmp_path):
    project = render(tmp_path, task="tabular_regression")

    assert_complete_project(project, "diabetes-regressor", "diabetes_regressor")
    package = project / "src" / "diabetes_regressor"
    for module, name in (("data", "DiabetesDataModule"), ("model", "Regressor"), ("network", "MLP")):
        assert f"class {name}(" in (package / f"{module}.py").read_text(encoding="utf-8")
    # The example's own files name nothing of the classifier; the kit's are the same in both.
    own = [*package.glob("*.py"), *project.glob("configs/*.yaml"), *project.glob("tests/*.py")]
    classifier = [
        str(path) for path in own if re.search(r"ConvNet|Digits|Classifier|val/acc", path.read_text())
    ]
    assert classifier == []
    assert "val/mse" in (project / "configs" / "default.yaml").read_text(encoding="utf-8")
    assert "tabular regression" in (project / "README.md").read_text(encoding="utf-8")
    assert not (project / "tests" / "test_slurm.py").exists()  # its nox session says why it skips


@pytest.mark.parametrize("license_name", list(LICENSE_PHRASES))
def test_only_the_chosen_license_is_kept_with_author_and_year(tmp_path, license_name):
    years_during_render = {str(datetime.now(timezone.utc).year)}
    project = render(tmp_path, license=license_name, author="Ada Lovelace")
    years_during_render.add(str(datetime.now(timezone.utc).year))

    assert_complete_project(project, DEFAULT_SLUG, DEFAULT_PACKAGE)
    text = (project / "LICENSE").read_text(encoding="utf-8")
    assert LICENSE_PHRASES[license_name] in text
    other_phrases = [phrase for name, phrase in LICENSE_PHRASES.items() if name != license_name]
    assert not any(phrase in text for phrase in other_phrases)
    copyright_lines = [line for line in text.splitlines() if "Copyright" in line and "Ada Lovelace" in line]
    assert len(copyright_lines) == 1
    assert any(year in copyright_lines[0] for year in years_during_render)


@pytest.mark.parametrize("torch_build", TORCH_BUILDS)
def test_next_steps_install_the_chosen_torch_build(tmp_path, capfd, torch_build):
    project = render(tmp_path, torch_build=torch_build)

    assert_complete_project(project, DEFAULT_SLUG, DEFAULT_PACKAGE)
    printed = capfd.readouterr().out
    steps = [
        f"cd {project}",
        f"pip install torch --index-url https://download.pytorch.org/whl/{torch_build}",
        'pip install -e ".[dev]"',
        "python main.py fit",
        "python main.py test --ckpt_path=best",
        "tensorboard --logdir logs",
        "pytest",
    ]
    commands = [line.split("  #")[0].strip() for line in printed.splitlines() if line.startswith("  ")]
    assert commands == steps


@pytest.mark.parametrize("python_version", PYTHON_VERSIONS)
def test_python_version_sets_the_minimum_python_and_lint_target(tmp_path, python_version):
    project = render(tmp_path, python_version=python_version)

    assert_complete_project(project, DEFAULT_SLUG, DEFAULT_PACKAGE, python_version)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["tool"]["ruff"]["target-version"] == "py" + python_version.replace(".", "")


def test_the_projects_torch_builds_are_the_templates_choices(tmp_path):
    """The doctor and the GPU sessions suggest builds from kit/torch_build.py; the prompt offers
    cookiecutter.json's list. Adding a build means adding it to both, and this says where."""
    project = render(tmp_path)
    (path,) = project.glob("src/*/kit/torch_build.py")
    spec = importlib.util.spec_from_file_location("torch_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert list(module.BUILDS) == TORCH_BUILDS, "change kit/torch_build.py and cookiecutter.json together"


def test_both_tasks_share_one_kit_and_its_tests(tmp_path):
    """The kit and its tests are the same files whatever the example, so the kit session (its tests
    on the project with the example's code deleted) speaks for both tasks."""
    classifier = render(tmp_path / "classifier")
    regression = render(tmp_path / "regression", task="tabular_regression", project_name="Digits Classifier")
    for folder in ("src/digits_classifier/kit", "tests/kit"):
        files = sorted(path.relative_to(classifier) for path in (classifier / folder).rglob("*.py"))
        assert files and files == sorted(
            path.relative_to(regression) for path in (regression / folder).rglob("*.py")
        )
        assert all((classifier / name).read_bytes() == (regression / name).read_bytes() for name in files)
