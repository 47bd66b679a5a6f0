"""TensorBoard itself serves a run: scalars, hparams and pictures, read through its own HTTP API."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode

import pytest

QUIET = "--trainer.enable_progress_bar=false"
WAIT_S = 90  # TensorBoard's first start imports a lot, then it scans the logs


class TensorBoard:
    """The HTTP data API of a running TensorBoard (the routes its web page uses)."""

    def __init__(self, url: str, process: subprocess.Popen, output: IO[str]) -> None:
        self.url, self.process, self.output = url, process, output

    def get(self, route: str, **query: str) -> Any:
        return self._request(urllib.request.Request(f"{self.url}{route}?{urlencode(query)}".rstrip("?")))

    def post(self, route: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(f"{self.url}{route}", data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        return self._request(request)

    def wait_for_run(self, run: str) -> None:
        """Until the server answers and lists `run`; fails at once if the server exits."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.output.seek(0)
                pytest.fail(f"tensorboard exited ({self.process.returncode}):\n{self.output.read()[-3000:]}")
            try:
                if run in self.get("/data/runs"):
                    return
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet
            time.sleep(0.5)
        pytest.fail(f"tensorboard did not list the run {run!r} within {WAIT_S} s")

    def _request(self, request: urllib.request.Request) -> Any:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if response.headers.get_content_type() == "application/json" else body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def tensorboard_server(logdir: Path) -> Iterator[TensorBoard]:
    """`tensorboard --logdir LOGDIR` on the loopback interface, stopped by its pid on the way out."""
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    # Output to a file, not a pipe: a pipe nobody reads fills up and blocks the server.
    with (logdir.parent / "tensorboard.log").open("w+") as output:
        process = subprocess.Popen([*command, "--port", str(port)], stdout=output, stderr=subprocess.STDOUT)
        try:
            yield TensorBoard(f"http://127.0.0.1:{port}", process, output)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest.mark.slow
def test_tensorboard_serves_the_runs_scalars_hparams_and_pictures(run_main, tmp_path):
    run_main("fit", "--trainer.max_epochs=2", "--trainer.callbacks.every_n_epochs=1", QUIET)
    run_main("test", "--ckpt_path=best", QUIET)  # into the same run
    (run_dir,) = (tmp_path / "logs").glob("*/version_0")
    run = f"{run_dir.parent.name}/{run_dir.name}"

    with tensorboard_server(tmp_path / "logs") as tensorboard:  # started after the fit: the run is complete
        tensorboard.wait_for_run(run)

        # Scalars: one validation accuracy per epoch, each a [wall_time, step, value] triple.
        accuracy = tensorboard.get("/data/plugin/scalars/scalars", run=run, tag="val/acc")
        assert len(accuracy) == 2 and all(0 <= value <= 1 for _, _, value in accuracy)

        # HParams: the settings under their config names, the run's scores (test's too) as metrics.
        experiment = tensorboard.post("/data/plugin/hparams/experiment", {"experimentName": ""})
        names = {info["name"] for info in experiment["hparamInfos"]}
        assert {"optimizer.lr", "model.network.width", "data.batch_size", "trainer.precision"} <= names
        metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
        assert {"val/acc", "val/acc_best", "test/acc"} <= metrics and "hp_metric" not in metrics
        assert not [name for name in names if name.startswith("_")], "no private entries"

        # Pictures: both tags; the confusion matrix once per epoch, served as PNG files.
        image_tags = tensorboard.get("/data/plugin/images/tags")[run]
        assert {"val/confusion_matrix", "val/samples"} <= set(image_tags)
        query = {"run": run, "tag": "val/confusion_matrix", "sample": "0"}
        entries = tensorboard.get("/data/plugin/images/images", **query)
        assert len(entries) == 2
        png = tensorboard.get(f"/data/plugin/images/individualImage?{entries[-1]['query']}")
        assert png.startswith(b"\x89PNG")
