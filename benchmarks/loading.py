"""Data at scale: the project's train loader against a plain `DataLoader`, one file per sample on disk.

The samples are the digits written out as the project README's recipe reads them (`NpyFiles`: one
`<index>_<label>.npy` per sample), 1x, 4x and 16x over. Per size, in a fresh process:
- samples per second through the project's loader (a `KitDataModule` subclass as in the README:
  torchdata's `StatefulDataLoader`, the seeded sampler, persistent workers) and through a plain
  `DataLoader(dataset, batch_size, shuffle=True, num_workers=...)`, as a user would write it;
  whole epochs, the two alternating, `rounds` each after one warm-up epoch each; the ratio is
  the median of each round's pair (ours / plain);
- the epoch time of the project's loader, and its peak memory (resident, the process and its
  loader workers together, sampled every 20 ms over one more, untimed epoch).
Time should grow with the size, memory should not. Run as a module for one size:
`python -m benchmarks.loading PROJECT FOLDER FACTOR WORKERS ROUNDS` prints its JSON.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .project import import_module, project_env

FACTORS = (1, 4, 16)
WORKERS = 2
BATCH_SIZE = 64


class NpyFiles(Dataset):
    """The README's recipe: one sample per file, `<index>_<label>.npy`."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(folder.glob("*.npy"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = self.files[index]
        return torch.from_numpy(np.load(path)), int(path.stem.split("_")[1])


def write_samples(project: Path, folder: Path, factor: int) -> int:
    """The project's digits, `factor` times over, one 1x8x8 `.npy` file each; the number written."""
    images, labels = import_module(project, "data").load_digits()
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for _ in range(factor):
        for image, label in zip(images, labels, strict=True):
            np.save(folder / f"{count:07d}_{label}.npy", image)
            count += 1
    return count


class PeakMemory:
    """The largest resident memory of this process and its children (loader workers) together."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval, self.peak, self._running = interval, 0, False
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._running = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        self._thread.join()

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, sum(resident_bytes(pid) for pid in [os.getpid(), *children()]))
            time.sleep(self.interval)


def children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            if fields[1] == me:
                found.append(int(entry.name))
    return found


def resident_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def project_loader(project: Path, folder: Path, workers: int) -> Any:
    """The project's own train loader over the files: the README's `FilesDataModule`."""
    base = import_module(project, "kit.datamodule").KitDataModule

    class FilesDataModule(base):  # type: ignore[misc, valid-type]
        def setup(self, stage: str) -> None:
            self.train_set = NpyFiles(folder)

    datamodule = FilesDataModule(batch_size=BATCH_SIZE, num_workers=workers)
    datamodule.setup("fit")
    return datamodule.train_dataloader()


def epoch_seconds(loader: Any, epoch: int) -> float:
    for sampler in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # as Lightning does before each epoch
    started = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - started


def measure_one(project: Path, folder: Path, factor: int, workers: int, rounds: int) -> dict:
    """In this process: the two loaders over `factor`x the digits; see the module's docstring."""
    torch.set_num_threads(1)
    samples = write_samples(project, folder, factor)
    ours = project_loader(project, folder, workers)
    plain = DataLoader(NpyFiles(folder), batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
    epoch_seconds(ours, 0), epoch_seconds(plain, 0)  # warm-up: workers start, files get cached
    ours_times, plain_times = [], []
    for round_index in range(1, rounds + 1):
        pair = [(ours, ours_times), (plain, plain_times)]
        for loader, times in pair if round_index % 2 else pair[::-1]:
            times.append(epoch_seconds(loader, round_index))
    del plain  # its workers end with their epoch; the memory is ours alone, in an untimed epoch
    with PeakMemory() as memory:  # its sampling costs CPU time: kept out of the timed epochs
        epoch_seconds(ours, rounds + 1)
    ratios = [plain_time / our_time for our_time, plain_time in zip(ours_times, plain_times, strict=True)]
    return {
        "factor": factor,
        "samples": samples,
        "workers": workers,
        "epoch_s": statistics.median(ours_times),
        "plain_epoch_s": statistics.median(plain_times),
        "samples_per_s": samples / statistics.median(ours_times),
        "plain_samples_per_s": samples / statistics.median(plain_times),
        "throughput_ratio": statistics.median(ratios),
        "throughput_ratio_spread": max(ratios) - min(ratios),
        "peak_memory_mib": memory.peak / 2**20,
    }


def measure(project: Path, log: Callable[[str], None] = print, rounds: int = 5) -> dict:
    """Each size in a fresh process, so that its peak memory is its own."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        for factor in FACTORS:
            log(f"loading: {factor}x the digits on disk, {WORKERS} workers")
            command = [sys.executable, "-m", "benchmarks.loading", str(project), f"{tmp}/{factor}x"]
            command += [str(factor), str(WORKERS), str(rounds)]
            done = subprocess.run(
                command,
                cwd=Path(__file__).resolve().parents[1],
                env=project_env(project),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"loading {factor}x failed:\n{done.stderr[-3000:]}")
            results[f"{factor}x"] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


HEADER = ["size", "samples", "ours: epoch s / samples/s", "plain: samples/s", "x plain (spread)", "peak MiB"]


def rows(result: dict) -> list[list[str]]:
    return [
        [
            size,
            str(figures["samples"]),
            "{epoch_s:.2f} / {samples_per_s:.0f}".format(**figures),
            "{plain_samples_per_s:.0f}".format(**figures),
            "x{throughput_ratio:.3f} ({throughput_ratio_spread:.3f})".format(**figures),
            "{peak_memory_mib:.0f}".format(**figures),
        ]
        for size, figures in result.items()
    ]


def main(argv: list[str]) -> None:
    project, folder, factor, workers, rounds = argv
    print(json.dumps(measure_one(Path(project), Path(folder), int(factor), int(workers), int(rounds))))


if __name__ == "__main__":
    main(sys.argv[1:])
