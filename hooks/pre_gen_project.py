"""Refuse bad answers before cookiecutter writes a single file of the new project.

Cookiecutter renders this file with Jinja and runs it inside the freshly created (still empty)
project folder; when it exits non-zero, cookiecutter deletes that folder again. Each problem is
printed as one line on stderr: the bad value and what would be valid.

The checks are small pure functions so the template's tests can import and call them directly.
"""

import json
import keyword
import re
import sys
from pathlib import Path

# The answers arrive as JSON inside a raw string, so quotes or backslashes in them cannot break
# this script. Imported without rendering (by tests), the string is just the Jinja placeholder.
RENDERED_ANSWERS = r"""{{ cookiecutter | tojson }}"""

# Unrendered (imported by tests) the answers are not JSON; cookiecutter.json is then the source.
try:
    ANSWERS = json.loads(RENDERED_ANSWERS)
except json.JSONDecodeError:
    ANSWERS = json.loads((Path(__file__).resolve().parents[1] / "cookiecutter.json").read_text())

# The one list of supported Pythons lives in cookiecutter.json (a private variable, never prompted).
SUPPORTED_PYTHONS = tuple(ANSWERS["_python_versions"])

# A package with one of these names would be imported instead of the real module, or would clash
# with a file of the generated project (main.py, src/, tests/).
PROJECT_IMPORTS = frozenset(
    {
        "torch",
        "lightning",
        "pytorch_lightning",
        "torchmetrics",
        "tensorboard",
        "jsonargparse",
        "sklearn",
        "numpy",
        "yaml",
        "test",
        "tests",
        "main",
        "src",
        "setuptools",
        "pip",
        "nox",
        "pytest",
    }
)

# sys.stdlib_module_names only knows the running Python. The project also supports older ones,
# whose standard libraries had these extra modules (removed in 3.12/3.13, or added in 3.11).
OTHER_SUPPORTED_STDLIB = frozenset(
    {
        "asynchat",
        "asyncore",
        "distutils",
        "imp",
        "smtpd",
        "aifc",
        "audioop",
        "cgi",
        "cgitb",
        "chunk",
        "crypt",
        "imghdr",
        "lib2to3",
        "mailcap",
        "msilib",
        "nis",
        "nntplib",
        "ossaudiodev",
        "pipes",
        "sndhdr",
        "spwd",
        "sunau",
        "telnetlib",
        "uu",
        "xdrlib",
        "tomllib",
    }
)
STDLIB_MODULES = frozenset(sys.stdlib_module_names) | OTHER_SUPPORTED_STDLIB

SLUG_PATTERN = re.compile(r"[a-z][a-z0-9]*([-_][a-z0-9]+)*")
PYTHON_PATTERN = re.compile(r"3\.(\d+)")


def check_project_name(name: str) -> str | None:
    """The folder and package names are derived from it, so it needs a letter or digit."""
    if not name.strip():
        return "project_name is empty: give the project a name, e.g. project_name='Digits Classifier'"
    if not any(char.isalnum() for char in name):
        return f"project_name {name!r} has no letter or digit: use a name like 'Digits Classifier'"
    return None


def check_project_slug(slug: str) -> str | None:
    """The slug names the folder and the distribution on PyPI: keep it lowercase and portable."""
    if SLUG_PATTERN.fullmatch(slug):
        return None
    suggestion = re.sub(r"[^a-z0-9]+", "-", slug.lower()).strip("-") or "my-project"
    return (
        f"project_slug {slug!r} is not valid: use lowercase letters and digits, starting with a letter,"
        f" joined by single '-' or '_' (e.g. {suggestion!r})"
    )


# The generated tests name the package inside lines that must fit ruff's 110 characters.
MAX_PACKAGE_NAME = 36


def check_package_name(name: str) -> str | None:
    """The package is what users `import`, so it must be an importable, unshadowed PEP 8 name."""
    if not (name.isidentifier() and name.isascii()):
        suggestion = re.sub(r"\W+", "_", name.lower(), flags=re.ASCII).strip("_") or "my_package"
        if suggestion[0].isdigit():
            suggestion = f"pkg_{suggestion}"
        return (
            f"package_name {name!r} is not a valid Python identifier: use ASCII letters, digits and"
            f" underscores, not starting with a digit (e.g. {suggestion!r})"
        )
    if keyword.iskeyword(name):
        return f"package_name {name!r} is a Python keyword and cannot be imported: use e.g. 'my_{name}'"
    if name != name.lower():
        return f"package_name {name!r} is not lowercase as PEP 8 asks for packages: use {name.lower()!r}"
    if name in PROJECT_IMPORTS:
        return (
            f"package_name {name!r} would shadow the module {name!r} that the project imports or"
            f" contains: use another name, e.g. 'my_{name}'"
        )
    if name in STDLIB_MODULES:
        return (
            f"package_name {name!r} would shadow the standard-library module {name!r}:"
            f" use another name, e.g. 'my_{name}'"
        )
    if len(name) > MAX_PACKAGE_NAME:
        shorter = name[:MAX_PACKAGE_NAME].rstrip("_")
        return (
            f"package_name {name!r} has {len(name)} characters, more than the {MAX_PACKAGE_NAME} the"
            f" generated code keeps within its line length: use a shorter one, e.g. {shorter!r}"
        )
    return None


def check_python_version(version: str) -> str | None:
    """The lowest Python the project supports; newer ones are not yet covered by its dependencies."""
    if version in SUPPORTED_PYTHONS:
        return None
    return f"python_version {version!r} is not supported: use one of {', '.join(SUPPORTED_PYTHONS)}"


def check_email(email: str) -> str | None:
    """The email may be left empty, but a filled-in one must at least look like an address."""
    if not email or "@" in email:
        return None
    return f"email {email!r} has no '@': use an address like 'you@example.com' or leave it empty"


def find_problems(answers: dict[str, str]) -> list[str]:
    """Every problem with the answers, so a user fixes them all in one go."""
    checks = [
        check_project_name(answers["project_name"]),
        check_project_slug(answers["project_slug"]),
        check_package_name(answers["package_name"]),
        check_python_version(answers["python_version"]),
        check_email(answers["email"]),
    ]
    return [problem for problem in checks if problem is not None]


def main() -> int:
    problems = find_problems(ANSWERS)
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
