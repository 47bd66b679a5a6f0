"""Which PyTorch build this project installs, and the pip command that installs it.

PyTorch publishes one wheel per CUDA version on its own package index; pip alone would pick
PyPI's default build. Standard library only, on purpose: the noxfile and the doctor load this
file before (or without) torch being importable.
"""

TORCH_BUILD = "{{ cookiecutter.torch_build }}"  # chosen when the project was generated

INDEX = "https://download.pytorch.org/whl"
BUILDS = ("cpu", "cu126", "cu128", "cu130")  # oldest CUDA first


def cuda_version(build: str) -> tuple[int, int] | None:
    """The CUDA version a build targets (`cu128` -> (12, 8)); None for the CPU build."""
    _check(build)
    if build == "cpu":
        return None
    digits = build.removeprefix("cu")
    return int(digits[:-1]), int(digits[-1])


def index_url(build: str) -> str:
    """PyTorch's package index for a build, e.g. https://download.pytorch.org/whl/cu128."""
    _check(build)
    return f"{INDEX}/{build}"


def pip_install_command(build: str = TORCH_BUILD) -> str:
    """The exact command that installs torch in this build."""
    return f"pip install torch --index-url {index_url(build)}"


def _check(build: str) -> None:
    if build not in BUILDS:
        raise ValueError(f"Unknown torch build {build!r}: choose one of {', '.join(BUILDS)}.")
