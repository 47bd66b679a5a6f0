"""Matching torchrun's world (kit/launcher.py): settings left at their defaults follow it, ones that
agree stay, ones that contradict it are refused by name, before any process group starts."""

from typing import Any

import pytest

from {{ cookiecutter.package_name }}.kit.launcher import (
    Launch,
    LaunchMismatchError,
    device_count,
    match_launch,
)

from kit_testing import run_fixtures_here


class TrainerConfig:
    """Stands in for the parsed `trainer` section of the config."""

    def __init__(self, devices: Any = "auto", num_nodes: int = 1, strategy: Any = "auto") -> None:
        self.devices, self.num_nodes, self.strategy = devices, num_nodes, strategy


@pytest.mark.parametrize(
    ("launch", "expected"),
    [(Launch(2, 2), (2, 1, "ddp")), (Launch(2, 1), (1, 2, "ddp")), (Launch(8, 4), (4, 2, "ddp"))],
)
def test_settings_left_at_their_defaults_follow_torchrun(launch, expected):
    trainer = TrainerConfig()
    match_launch(trainer, launch)
    assert (trainer.devices, trainer.num_nodes, trainer.strategy) == expected


def test_explicit_settings_that_agree_with_torchrun_are_kept():
    trainer = TrainerConfig(devices=[0, 1], num_nodes=2, strategy="ddp_find_unused_parameters_true")
    match_launch(trainer, Launch(4, 2))
    assert (trainer.devices, trainer.num_nodes, trainer.strategy) == (
        [0, 1],
        2,
        "ddp_find_unused_parameters_true",
    )


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"devices": 1}, "--trainer.devices=1"),
        ({"devices": "0,1,2"}, "--trainer.devices=0,1,2"),
        ({"num_nodes": 3}, "--trainer.num_nodes=3"),
        ({"strategy": "ddp_spawn"}, "--trainer.strategy=ddp_spawn"),
        ({"strategy": "single_device"}, "--trainer.strategy=single_device"),
    ],
)
def test_settings_that_contradict_torchrun_are_refused_by_name(settings, named):
    with pytest.raises(LaunchMismatchError, match="torchrun started 4 processes") as error:
        match_launch(TrainerConfig(**settings), Launch(4, 2))
    assert named in str(error.value)


@pytest.mark.parametrize(
    ("devices", "count"), [("auto", None), (-1, None), ("-1", None), (2, 2), ("3", 3), ([0, 2], 2)]
)
def test_device_count_reads_every_form_of_trainer_devices(devices, count):
    assert device_count(devices) == count


def test_under_torchrun_a_contradicting_flag_stops_the_cli_with_one_line(tmp_path, monkeypatch, capsys):
    # What torchrun --nproc-per-node=2 sets; the error comes before any process group starts.
    for name, value in {"TORCHELASTIC_RUN_ID": "test", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_fixtures_here(monkeypatch, "fit", "--trainer.accelerator=cpu", "--trainer.devices=1")
    assert exit_info.value.code == 2  # run() caught it: no traceback
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: torchrun started 2 processes") and "--trainer.devices=1" in error
