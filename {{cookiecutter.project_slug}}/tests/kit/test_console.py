"""What the console shows (kit/console.py, kit/serving.py): short parser errors and a quiet Ctrl-C.

The example's tests check that its default `fit` and `test` print no warning a user cannot act
on (tests/test_quiet_console.py).
"""

import signal
from pathlib import Path

import pytest

from kit_testing import (
    QUICK,
    extra,
    free_port,
    run_fixtures_here,
    start_fixtures,
    stop_server,
    wait_until_serving,
)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-c", "{broken}"], "Problems parsing config"),
        (["--trainer.max_epochs=-"], "--trainer.max_epochs=-: expected int or null"),
    ],
    ids=["yaml-syntax", "not-a-number"],
)
def test_a_wrong_value_prints_the_error_and_one_usage_line(flags, message, tmp_path, monkeypatch, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  max_epochs: [1\n")  # an unclosed list: a YAML syntax error
    flags = [flag.replace("{broken}", str(broken)) for flag in flags]
    with pytest.raises(SystemExit) as stopped:
        run_fixtures_here(monkeypatch, "fit", f"--trainer.default_root_dir={tmp_path}", *flags, *QUICK)
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: ") and message in "\n".join(lines)
    # jsonargparse alone prints the whole usage (every flag of the model, data and Trainer) first.
    usage = [line for line in lines if line.startswith("usage:")]
    assert usage == [lines[-1]] and "fit --help" in usage[0], lines
    assert not any("--trainer.max_epochs MAX_EPOCHS" in line for line in lines)


# A value no accepted type takes: jsonargparse explains each type it tried, in 9 to 12 lines.
ONE_LINE = {
    "not-a-number": ({}, ["--trainer.max_epochs=abc"], "--trainer.max_epochs=abc: expected int or null"),
    "unknown-class": (
        {},
        ["--optimizer=torch.optim.Nope"],
        "--optimizer=torch.optim.Nope: module 'torch.optim' has no attribute 'Nope'; "
        "expected an Optimizer subclass or null",
    ),
    "no-such-class": (
        {},
        ["--optimizer=Nope"],
        "--optimizer=Nope: no such class (give its import path, e.g. my_package.MyClass); "
        "expected an Optimizer subclass or null",
    ),
    "unknown-precision": (
        {},
        ["--trainer.precision=17"],
        "--trainer.precision=17: expected 64, 32, 16, transformer-engine, transformer-engine-float16, "
        "16-true, 16-mixed, bf16-true, bf16-mixed, 32-true, 64-true, bf16 or null",
    ),
    "environment": (
        {"PL_FIT__TRAINER__MAX_EPOCHS": "abc"},
        [],
        "PL_FIT__TRAINER__MAX_EPOCHS=abc: expected int or null",
    ),
}


@pytest.mark.parametrize(("environment", "flags", "line"), ONE_LINE.values(), ids=ONE_LINE.keys())
def test_a_value_no_type_takes_is_one_line_naming_the_setting_and_what_it_takes(
    environment, flags, line, tmp_path, monkeypatch, capsys
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        run_fixtures_here(monkeypatch, "fit", f"--trainer.default_root_dir={tmp_path}", *flags, *QUICK)
    assert stopped.value.code == 2
    error, usage = capsys.readouterr().err.strip().splitlines()
    assert error == f"error: {line}" and usage.startswith("usage: ")
    assert not (tmp_path / "lightning_logs").exists(), "a refusal writes nothing"


def test_help_still_prints_every_option(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_fixtures_here(monkeypatch, "fit", "--help")
    assert stopped.value.code == 0
    assert "--trainer.max_epochs" in capsys.readouterr().out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as patch:
        run_fixtures_here(
            patch, "fit", "--trainer.max_epochs=1", f"--trainer.default_root_dir={workdir}", *QUICK
        )
    return workdir


@pytest.mark.slow
def test_ctrl_c_stops_a_server_in_one_line_with_exit_code_130(trained):
    extra("litserve", "serve")
    port = free_port()
    server = start_fixtures(trained, "serve", "--ckpt_path=best", f"--port={port}")
    wait_until_serving(server, port)
    stopped = stop_server(server)  # SIGINT to its whole process group, as Ctrl-C does; none left
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    output = stopped.stdout + stopped.stderr
    # Not in any process: the server's, the HTTP server's (uvicorn re-raises the signal it
    # handled) or the inference worker's.
    assert "Traceback" not in output and "KeyboardInterrupt\n" not in output, output[-3000:]
    assert "KeyboardInterrupt received" not in output, "LitServe's line: the kit's says it"
    assert stopped.stderr.strip().splitlines()[-1] == "Stopped serving (SIGINT).", stopped.stderr[-1000:]
