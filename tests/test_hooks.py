"""Bad answers stop cookiecutter before it writes anything, with a message that names the fix.

The main tests run the `cookiecutter` command exactly as a user would; a few more call the
validation functions directly for cases that need no rendering.
"""

import importlib.util
from types import ModuleType

import pytest
from conftest import PYTHON_VERSIONS, TEMPLATE_ROOT, render_cli


def load_pre_gen_hook() -> ModuleType:
    """The hook is a script, not a package module: load it by path (its Jinja stays unrendered)."""
    spec = importlib.util.spec_from_file_location(
        "pre_gen_project", TEMPLATE_ROOT / "hooks" / "pre_gen_project.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pre_gen = load_pre_gen_hook()
SUPPORTED = ", ".join(PYTHON_VERSIONS)

# (answers, the bad value as the message quotes it, what the message must offer instead)
BAD_ANSWERS = [
    pytest.param(["package_name=my-pkg"], "'my-pkg'", "'my_pkg'", id="package-not-identifier"),
    pytest.param(["package_name=2fast"], "'2fast'", "not starting with a digit", id="package-leading-digit"),
    pytest.param(["package_name=class"], "'class'", "keyword", id="package-keyword"),
    pytest.param(["package_name=MyPkg"], "'MyPkg'", "'mypkg'", id="package-uppercase"),
    pytest.param(["package_name=" + "a" * 37], "37 characters", "use a shorter one", id="package-too-long"),
    pytest.param(["package_name=torch"], "'torch'", "use another name", id="package-shadows-torch"),
    pytest.param(
        ["package_name=lightning"], "'lightning'", "use another name", id="package-shadows-lightning"
    ),
    pytest.param(["package_name=test"], "'test'", "use another name", id="package-shadows-test"),
    pytest.param(["package_name=json"], "'json'", "standard-library", id="package-shadows-stdlib"),
    pytest.param(["project_slug=My Project!"], "'My Project!'", "'my-project'", id="slug-invalid"),
    pytest.param(["python_version=3.8"], "'3.8'", SUPPORTED, id="python-too-old"),
    pytest.param(["python_version=3.14"], "'3.14'", SUPPORTED, id="python-too-new"),
    pytest.param(["python_version=three"], "'three'", SUPPORTED, id="python-not-a-version"),
    pytest.param(["project_name="], "project_name is empty", "e.g.", id="name-empty"),
    pytest.param(["project_name=   "], "project_name is empty", "e.g.", id="name-blank"),
    pytest.param(["project_name=!!!"], "'!!!'", "letter or digit", id="name-without-letters"),
    pytest.param(["email=you.example.com"], "'you.example.com'", "'@'", id="email-without-at"),
    # Cookiecutter itself refuses a value outside a choice list; checked so that stays true.
    pytest.param(["license=GPL"], "GPL", "'MIT', 'Apache-2.0', 'BSD-3-Clause', 'Proprietary'", id="license"),
    pytest.param(
        ["task=object_detection"],
        "object_detection",
        "'image_classification', 'tabular_regression'",
        id="task",
    ),
]


@pytest.mark.parametrize(("answers", "bad_value", "valid_hint"), BAD_ANSWERS)
def test_bad_answer_is_refused_with_a_fix_and_nothing_is_written(tmp_path, answers, bad_value, valid_hint):
    result = render_cli(tmp_path, *answers)

    assert result.returncode != 0
    assert any(bad_value in line and valid_hint in line for line in result.stderr.splitlines()), result.stderr
    assert list(tmp_path.iterdir()) == []


def test_every_problem_is_reported_in_one_run(tmp_path):
    result = render_cli(tmp_path, "package_name=class", "python_version=3.8", "email=nobody")

    assert result.returncode != 0
    for field in ("package_name 'class'", "python_version '3.8'", "email 'nobody'"):
        assert field in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_good_answers_pass_and_empty_email_is_allowed(tmp_path):
    result = render_cli(tmp_path, "project_name=Good Name 2", "email=", "python_version=3.13")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "good-name-2" / "src" / "good_name_2").is_dir()


@pytest.mark.parametrize("name", ["digits_classifier", "my_json", "tests_util", "_private", "model2"])
def test_valid_package_names_pass(name):
    assert pre_gen.check_package_name(name) is None


@pytest.mark.parametrize("name", ["café", "my pkg", "a.b", ""])
def test_non_ascii_or_dotted_package_names_are_refused(name):
    assert "not a valid Python identifier" in pre_gen.check_package_name(name)


@pytest.mark.parametrize("name", ["distutils", "tomllib", "telnetlib", "sys", "__future__"])
def test_stdlib_of_any_supported_python_is_refused_whatever_python_runs_cookiecutter(name):
    assert "standard-library" in pre_gen.check_package_name(name)


@pytest.mark.parametrize("slug", ["digits-classifier", "a", "my_proj-2", "x9"])
def test_valid_slugs_pass(slug):
    assert pre_gen.check_project_slug(slug) is None


@pytest.mark.parametrize("slug", ["", "-x", "x-", "a--b", "a_-b", "Ab", "9lives", "a b"])
def test_invalid_slugs_are_refused(slug):
    assert pre_gen.check_project_slug(slug) is not None
