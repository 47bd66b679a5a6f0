"""`--compile.enabled=true`: the forward really is compiled, and its checkpoints are ordinary ones
that load into an uncompiled model and back, with the same results."""

import json
import re
from pathlib import Path

import lightning as L
import pytest
import torch

from kit_testing import run_fixtures


class CompiledGraphs(L.Callback):
    """Writes how many graphs torch.compile built in this process: 0 means nothing was compiled."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        from torch._dynamo.utils import counters  # dynamo's own tally of what it compiled

        self.path.write_text(json.dumps({"graphs": counters["stats"]["unique_graphs"]}))


def compiled_graphs(workdir: Path, *args: str) -> tuple[int, str]:
    """Run the fixtures with the graph count on; (graphs compiled, the run's output)."""
    tally = workdir / "graphs.json"
    counting = ("--trainer.callbacks+=test_compiling.CompiledGraphs", f"--trainer.callbacks.path={tally}")
    result = run_fixtures(workdir, *args, *counting)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(tally.read_text())["graphs"], result.stdout


def validation_accuracy(output: str) -> float:
    (value,) = re.findall(r"val/acc\s*\S\s*([0-9.]+)", output)
    return float(value)


# Dynamo traces and wraps the model whatever the backend; inductor's kernel generation would add
# a minute on a CPU and changes nothing of what is checked here.
TRACE_ONLY = ("--compile.enabled=true", "--compile.backend=aot_eager")


@pytest.mark.slow
def test_a_compiled_run_writes_checkpoints_an_uncompiled_model_loads_and_back(tmp_path):
    graphs, _ = compiled_graphs(tmp_path, "fit", "--trainer.max_epochs=1", *TRACE_ONLY)
    assert graphs > 0, "the forward was not compiled"
    (last,) = tmp_path.rglob("last.ckpt")
    names = list(torch.load(last, map_location="cpu", weights_only=False)["state_dict"])
    assert names and not [name for name in names if "_orig_mod" in name], names

    plain = run_fixtures(tmp_path, "validate", f"--ckpt_path={last}")
    assert plain.returncode == 0, plain.stderr[-3000:]
    graphs, compiled = compiled_graphs(tmp_path, "validate", f"--ckpt_path={last}", *TRACE_ONLY)
    assert graphs > 0
    assert validation_accuracy(compiled) == pytest.approx(validation_accuracy(plain.stdout), abs=1e-6)


def test_compiling_is_off_unless_asked_for(tmp_path):
    graphs, _ = compiled_graphs(tmp_path, "validate")
    assert graphs == 0
