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
        (["--optimizer=torch.optim.Nope"], "module 'torch.optim' has no attribute 'Nope'"),
        (["--trainer.max_epochs=abc"], 'Parser key "trainer.max_epochs"'),
        (["-c", "{broken}"], "Problems parsing config"),
    ],
    ids=["unknown-class", "not-a-number", "yaml-syntax"],
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
    assert stopped.stderr.strip().splitlines()[-1] == "Stopped serving (SIGINT).", stopped.stderr[-1000:]
