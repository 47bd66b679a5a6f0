"""The kit on a model and data set it has never seen (`kit_fixtures`): nothing of the example.

Replace the example's network, model or data, and these still pass: they are the kit's promises.
Every file of the kit and of this folder holds to that: `example_uses` below checks it.
"""

import ast
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.fabric.plugins import TorchCheckpointIO

from kit_fixtures import SAMPLES
from kit_testing import KIT_TESTS, PROJECT_ROOT, QUICK, run_fixtures, run_fixtures_here

PACKAGE = "{{ cookiecutter.package_name }}"
KIT = PROJECT_ROOT / "src" / PACKAGE / "kit"
# main.py, what runs it, and tests/conftest.py (which runs it for the example's tests).
NOT_FOR_THE_KIT = ("main", "runpy", "conftest")


def last_checkpoint(folder: Path) -> dict:
    (path,) = folder.rglob("last.ckpt")
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_the_kit_trains_checkpoints_and_finds_them_again_for_any_model(tmp_path):
    result = run_fixtures(tmp_path, "fit", "--trainer.max_epochs=3")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = (tmp_path / "lightning_logs").glob("version_*")
    names = sorted(path.name for path in (run / "checkpoints").iterdir())
    assert names[0].startswith("best-") and names[-1] == "last.ckpt", names
    best = next(key for key in last_checkpoint(tmp_path)["callbacks"] if key.startswith("BestCheckpoint"))
    assert last_checkpoint(tmp_path)["callbacks"][best]["best_model_score"] > 0.9, "the blobs are easy"

    tested = run_fixtures(tmp_path, "validate", "--ckpt_path=best")
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert f"--ckpt_path=best: {run}/checkpoints/best-" in tested.stdout, "which file, named before it runs"


def test_each_epoch_serialises_its_checkpoint_state_once(tmp_path, monkeypatch):
    """When the best checkpoint and last.ckpt are saved at the same epoch end, they hold the same
    state: it is serialised once (into the best file) and copied into last.ckpt."""
    serialised: list[tuple[int, str]] = []
    serialise = TorchCheckpointIO.save_checkpoint

    def counting(self: TorchCheckpointIO, checkpoint: dict, path: Any, *args: Any, **kwargs: Any) -> None:
        serialised.append((checkpoint["global_step"], Path(path).name))
        serialise(self, checkpoint, path, *args, **kwargs)

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", counting)
    root = f"--trainer.default_root_dir={tmp_path}"
    run_fixtures_here(monkeypatch, "fit", "--trainer.max_epochs=3", root, *QUICK)
    assert [step for step, _ in serialised] == [15, 30, 45], serialised  # 15 batches an epoch
    first_file = serialised[0][1]
    assert first_file.startswith(".best-"), f"epoch 0 always improves: {first_file}"
    checkpoints = next(tmp_path.glob("lightning_logs/version_*/checkpoints"))
    last = checkpoints / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 45
    for best in checkpoints.glob("best-*.ckpt"):
        if torch.load(best, weights_only=True)["global_step"] == 45:  # improved at the end: the same bytes
            assert best.read_bytes() == last.read_bytes()


@pytest.mark.slow
def test_the_kit_resumes_any_model_exactly_after_sigterm(tmp_path):
    steps = ("--trainer.max_steps=40", "--trainer.max_epochs=-1")  # 15 batches an epoch
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir()
    stopped.mkdir()
    assert run_fixtures(straight, "fit", *steps).returncode == 0
    signal_at = ("--trainer.callbacks+=faults.SignalAt", "--trainer.callbacks.step=22")
    interrupted = run_fixtures(stopped, "fit", *steps, *signal_at)
    # Exit code 128 + SIGTERM: stopped, not finished.
    assert interrupted.returncode == 143 and last_checkpoint(stopped)["global_step"] == 22, interrupted.stderr
    resumed = run_fixtures(stopped, "fit", *steps, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    first, second = last_checkpoint(straight), last_checkpoint(stopped)
    assert second["global_step"] == 40
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), f"{name} differs after the resume"


@pytest.mark.slow
def test_the_kit_tunes_any_datamodules_batch_size(tmp_path):
    result = run_fixtures(tmp_path, "fit", "--data.batch_size=auto", "--trainer.max_epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    (config,) = tmp_path.rglob("config.yaml")
    # Nothing runs out of memory on a CPU: the whole training split in one batch.
    assert yaml.safe_load(config.read_text())["data"]["batch_size"] == SAMPLES


def test_the_kits_one_line_errors_need_no_example(tmp_path):
    result = run_fixtures(tmp_path, "validate", "--ckpt_path=last")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no last.ckpt" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def example_uses(source: str, in_kit: bool) -> list[str]:
    """What `source` takes from the example: imports of the package outside its kit (the user's
    network, model, data, sources, cli or any module they add), of main.py or of tests/conftest.py
    (which runs main.py), and paths to main.py. `in_kit`: a module of the kit (relative imports
    start from `<pkg>.kit`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parent = [PACKAGE, "kit"][: 3 - node.level] if in_kit and node.level else []
            base = ".".join([*parent, node.module or ""]).strip(".")
            names = [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.BinOp | ast.List | ast.Tuple):  # ROOT / "main.py", [python, "main.py"]
            parts = [node.right] if isinstance(node, ast.BinOp) else node.elts
            if any(isinstance(part, ast.Constant) and part.value == "main.py" for part in parts):
                found.append("a path to main.py")
        elif isinstance(node, ast.arg) and node.arg == "run_main":
            found.append("the run_main fixture")
        for name in names:
            kit = name == f"{PACKAGE}.kit" or name.startswith(f"{PACKAGE}.kit.")
            if (name.startswith(f"{PACKAGE}.") and not kit) or name.split(".")[0] in NOT_FOR_THE_KIT:
                found.append(f"import of {name}")
    return found


def test_the_kit_and_its_tests_never_use_the_example():
    """The kit's room names nothing of the user's: so replacing the example cannot break it."""
    files = sorted([*KIT.glob("*.py"), *KIT_TESTS.glob("*.py")])
    assert Path(__file__) in files and KIT / "cli.py" in files
    uses = {path.name: example_uses(path.read_text(), in_kit=path.parent == KIT) for path in files}
    assert not any(uses.values()), f"reaching into the example: {uses}"


@pytest.mark.parametrize(
    ("source", "in_kit"),
    [
        (f"from {PACKAGE}.model import Classifier", False),
        (f"import {PACKAGE}.data", False),
        (f"from {PACKAGE} import network", False),
        (f"from {PACKAGE}.cli import cli_main", False),
        ("from conftest import MAIN", False),
        ("import runpy", False),
        ("def test_x(run_main):\n    run_main('fit')", False),
        ("MAIN = ROOT / 'main.py'", False),
        ("subprocess.run([sys.executable, 'main.py', 'fit'])", False),
        ("from ..sources import load_digits_tensors", True),
        ("from .. import model", True),
        ("from ..my_parts import TinyMLP", True),
    ],
)
def test_the_check_catches_each_way_of_reaching_the_example(source, in_kit):
    """The check above can fail: each of these, planted in the kit's room, is caught."""
    assert example_uses(source, in_kit), source


def test_the_check_lets_the_kits_own_imports_through():
    kit_imports = f"from . import hardware\nfrom .tuning import BatchSizeTuner\nimport {PACKAGE}.kit.doctor"
    assert example_uses(kit_imports, in_kit=True) == []
    assert example_uses(f"from {PACKAGE}.kit.cli import KitCLI\nfrom kit_fixtures import Blobs", False) == []
    assert example_uses("print('python main.py doctor')", in_kit=True) == [], "naming main.py is fine"
