"""Shared fixtures: run `main.py` in-process, exactly as a user calls it, inside a temp folder."""

import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MAIN = PROJECT_ROOT / "main.py"


@pytest.fixture
def run_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Call `python main.py ARGS...` in-process, with logs written under a temp folder."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", [str(MAIN), *args])
        runpy.run_path(str(MAIN), run_name="__main__")

    return run


def tensorboard_scalars(run_dir: Path) -> dict[str, list[float]]:
    """Every scalar series in a run folder's TensorBoard event files, by tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[float]] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            series.setdefault(tag, []).extend(event.value for event in accumulator.Scalars(tag))
    return series


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
