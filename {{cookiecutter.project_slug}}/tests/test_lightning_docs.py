"""Lightning's documented command lines on the example itself: its defaults.

The kit's CLI is held to every documented command line in `tests/kit/test_documented_command_lines.py`.
"""

import pytest
import yaml

from {{ cookiecutter.package_name }}.cli import cli_main


def test_calling_the_cli_from_python_reads_the_same_defaults_as_main_py(run_main, capsys):
    with pytest.raises(SystemExit):
        run_main("fit", "--print_config")
    from_main = yaml.safe_load(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        cli_main(["fit", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out) == from_main
    assert from_main["optimizer"]["init_args"]["lr"] == 0.002  # configs/default.yaml, not class defaults
