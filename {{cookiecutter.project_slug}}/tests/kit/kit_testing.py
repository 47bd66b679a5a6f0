"""Helpers for the kit's tests; `tests/conftest.py` passes them on to the example's tests too.

A module of its own rather than a second conftest.py: pytest imports every conftest.py under the
one name `conftest`, so `from conftest import ...` would reach whichever folder's loaded last.
"""

import functools
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
KIT_TESTS = Path(__file__).resolve().parent
# Fixed flags of every `python -m kit_fixtures` run: a seeded run and a quiet output.
QUICK = (
    "--seed_everything=42",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)


def start_fixtures(workdir: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `python -m kit_fixtures ARGS` in `workdir`, logging there, in a process group of its own."""
    # tests/kit holds the fixtures and `faults`, the fault injectors both rooms' tests use.
    path = [PROJECT_ROOT / "src", KIT_TESTS, os.environ.get("PYTHONPATH", "")]
    python_path = os.pathsep.join(str(entry) for entry in path if entry)
    return subprocess.Popen(
        [sys.executable, "-m", "kit_fixtures", *args, f"--trainer.default_root_dir={workdir}", *QUICK],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Wait for a started run. One still going after `timeout` is killed whole (every DDP rank)
    and the test fails: a hang."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"{' '.join(map(str, process.args))} still running after {timeout} s: a hang")


def run_fixtures(
    workdir: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m kit_fixtures ARGS` in `workdir`, logging there: the kit's CLI around the fixtures.

    The command line a user types, in new processes (DDP needs them).
    """
    return finish(start_fixtures(workdir, *args, env=env), timeout)


def last_checkpoint(folder: Path) -> dict:
    """The one last.ckpt under `folder`, loaded."""
    import torch

    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=True)


def free_port() -> int:
    """A TCP port nothing listens on now, for a DDP rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_fixtures_here(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    """`python -m kit_fixtures ARGS` in this process: quicker, for runs without DDP."""
    from kit_fixtures import FixtureCLI, chosen_fixture, run

    fixture, rest = chosen_fixture(list(args))
    monkeypatch.setattr(sys, "argv", ["kit_fixtures", *rest])
    run(functools.partial(FixtureCLI, fixture))


def tensorboard_scalars(run_dir: Path) -> dict[str, list[float]]:
    """Every scalar series in a run folder's TensorBoard event files, by tag."""
    return {tag: [value for _, value in points] for tag, points in tensorboard_points(run_dir).items()}


def tensorboard_points(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series as (step, value) points, event file by event file (oldest first)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            series.setdefault(tag, []).extend((event.step, event.value) for event in accumulator.Scalars(tag))
    return series


def tensorboard_settings(run_dir: Path) -> dict[str, Any]:
    """The settings a run's session shows in TensorBoard's HParams tab (its plugin's own parser)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    settings: dict[str, Any] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events)).Reload()
        try:
            contents = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
        except KeyError:  # no hparams in these events: a test's or a predict's
            continue
        assert metadata.EXPERIMENT_TAG not in contents, (
            "a run's own experiment summary hides the others' settings"
        )
        if metadata.SESSION_START_INFO_TAG in contents:
            start = metadata.parse_session_start_info_plugin_data(contents[metadata.SESSION_START_INFO_TAG])
            for name, value in start.hparams.items():
                settings[name] = getattr(value, value.WhichOneof("kind"))
    return settings


def extra(module: str, name: str) -> Any:
    """`module`, which the optional extra `name` installs; without it the calling test module skips,
    saying how to install it. Sessions that install every extra (nox's cpu and kit sessions) set
    KIT_TESTS_NEED_EXTRAS=1, and there a missing one fails instead of skipping unseen."""
    if os.environ.get("KIT_TESTS_NEED_EXTRAS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f'needs the {name} extra: pip install -e ".[{name}]"')


def visible_gpus() -> int:
    """CUDA GPUs torch can use here (0 on a CPU-only build)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def requires_gpus(count: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test `gpu` and skip it, saying why, unless `count` CUDA GPUs are visible."""
    found = visible_gpus()

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        skip = pytest.mark.skipif(found < count, reason=f"needs {count} GPU(s), found {found}")
        return pytest.mark.gpu(skip(test))

    return decorate


def post_json(url: str, body: object, timeout: float = 30) -> tuple[int, dict]:
    """POST `body` as JSON to `url`: the HTTP status and the decoded JSON answer, errors included."""
    import json
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_until_serving(process: subprocess.Popen[str], port: int, timeout: float = 120) -> str:
    """Poll a started server's /health until it answers; its /predict URL. Fails if it exits first."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stdout, stderr = process.communicate()
            pytest.fail(
                f"the server exited with code {process.returncode}:\n{stdout[-2000:]}\n{stderr[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return f"http://127.0.0.1:{port}/predict"
        except OSError:
            time.sleep(0.3)
    stop_server(process)
    pytest.fail(f"no answer on port {port} after {timeout} s")


def stop_server(process: subprocess.Popen[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Stop a server started in a process group of its own as Ctrl-C would, and check it went whole."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    result = finish(process, timeout)
    for _ in range(50):  # its worker processes (LitServe's inference workers) stop with it
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return result
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail("processes of the server were still running 5 s after it stopped")
