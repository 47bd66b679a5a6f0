"""Train, validate, test or predict: `python main.py fit --help` lists every setting."""

from pathlib import Path

from {{ cookiecutter.package_name }}.cli import cli_main

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"

if __name__ == "__main__":  # required: spawn-based DDP launchers re-import this file
    cli_main(default_config_files=[DEFAULT_CONFIG])
