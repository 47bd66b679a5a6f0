"""Export and serving on the built-in example: file sizes, parity errors, latency, throughput.

Trains the default recipe for a few epochs (`--trainer.max_epochs=5`), exports the best
checkpoint in each format (size, the parity check's largest absolute difference, wall time of
the whole `main.py export` process), then serves the checkpoint and the ONNX export in turn:
latency (p50/p95) of single requests sent one after another by one client, and throughput with
8 clients (threads) sending at once. The clients run on the same machine as the server, so on
few cores they compete with it: the figures are a floor, not a ceiling.
"""

import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .accuracy import run
from .project import project_env

FORMATS = {"onnx": ".onnx", "exported_program": ".pt2", "torchscript": ".pt"}
SINGLE_REQUESTS = 200
CONCURRENT_CLIENTS = 8
CONCURRENT_REQUESTS = 800


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: bytes) -> float:
    """Seconds for one request's answer (which must be a 200)."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
        assert response.status == 200
    return time.perf_counter() - started


def serve_and_load(project: Path, cwd: Path, model_flag: str, body: bytes) -> dict:
    port = free_port()
    command = [sys.executable, str(project / "main.py"), "serve", model_flag, f"--port={port}"]
    server = subprocess.Popen(
        command,
        cwd=cwd,
        env=project_env(project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/predict"
    try:
        started = time.perf_counter()
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - started > 180:
                    raise RuntimeError(f"{' '.join(command)} did not start") from None
                time.sleep(0.2)
        ready_s = time.perf_counter() - started
        for _ in range(20):  # warm-up
            post(url, body)
        latencies = sorted(post(url, body) for _ in range(SINGLE_REQUESTS))
        with ThreadPoolExecutor(CONCURRENT_CLIENTS) as pool:
            started = time.perf_counter()
            concurrent = sorted(pool.map(lambda _: post(url, body), range(CONCURRENT_REQUESTS)))
            elapsed = time.perf_counter() - started
    finally:
        server.send_signal(signal.SIGTERM)  # stops it as Ctrl-C does, worker processes included
        server.wait(timeout=60)

    def percentile(values: list[float], share: float) -> float:
        return values[min(len(values) - 1, int(share * len(values)))] * 1e3

    return {
        "ready_s": ready_s,
        "single_p50_ms": statistics.median(latencies) * 1e3,
        "single_p95_ms": percentile(latencies, 0.95),
        "concurrent_clients": CONCURRENT_CLIENTS,
        "concurrent_req_per_s": CONCURRENT_REQUESTS / elapsed,
        "concurrent_p50_ms": statistics.median(concurrent) * 1e3,
        "concurrent_p95_ms": percentile(concurrent, 0.95),
    }


def measure(project: Path, log: Callable[[str], None] = print) -> dict:
    result: dict = {"exports": {}, "serving": {}}
    with tempfile.TemporaryDirectory(prefix="bench-shipping-") as tmp:
        cwd = Path(tmp)
        log("shipping: fit --trainer.max_epochs=5")
        run(project, cwd, "fit", "--trainer.max_epochs=5")
        for format, suffix in FORMATS.items():
            log(f"shipping: export --format={format}")
            wall_s, _ = run(project, cwd, "export", "--ckpt_path=best", f"--format={format}")
            (exported,) = cwd.glob(f"logs/lightning_logs/version_0/export/*{suffix}")
            metadata = json.loads(exported.with_name(exported.name + ".json").read_text())
            result["exports"][format] = {
                "bytes": exported.stat().st_size,
                "max_abs_error": metadata["parity"]["max_abs_error"],
                "tolerance": metadata["parity"]["tolerance"],
                "wall_s": wall_s,
            }
        image = [[[0.5] * 8 for _ in range(8)]]
        body = json.dumps({"input": image}).encode()
        (onnx,) = cwd.glob("logs/lightning_logs/version_0/export/*.onnx")
        for name, flag in (("checkpoint", "--ckpt_path=best"), ("onnx", f"--exported={onnx}")):
            log(f"shipping: serve {name}")
            result["serving"][name] = serve_and_load(project, cwd, flag, body)
    return result


HEADER = ["shipping", "size or latency (1 client)", "parity or throughput", "wall"]


def rows(result: dict) -> list[list[str]]:
    table = []
    for format, figures in result["exports"].items():
        table.append(
            [
                f"export {format}",
                f"{figures['bytes'] / 1e3:.1f} kB",
                f"max |diff| {figures['max_abs_error']:.1e} (tolerance {figures['tolerance']:g})",
                f"{figures['wall_s']:.1f} s",
            ]
        )
    for name, figures in result["serving"].items():
        table.append(
            [
                f"serve {name}",
                "p50 {single_p50_ms:.1f} ms, p95 {single_p95_ms:.1f} ms".format(**figures),
                "{concurrent_req_per_s:.0f} req/s with {concurrent_clients} clients "
                "(p50 {concurrent_p50_ms:.1f} ms, p95 {concurrent_p95_ms:.1f} ms)".format(**figures),
                f"ready in {figures['ready_s']:.1f} s",
            ]
        )
    return table
