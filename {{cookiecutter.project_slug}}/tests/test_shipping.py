"""The example shipped: exported with its metadata, predicting on a file of your own, and served
with the same answers as `predict`. The kit's own tests (tests/kit/test_export_and_serve.py) cover every
export format and the served checkpoint; here one short training run is shared by all.
"""

import csv
import json
import runpy
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from {{ cookiecutter.package_name }}.data import DigitsDataModule

from conftest import MAIN, extra, main_py_started
from kit_testing import free_port, post_json, stop_server, wait_until_serving

extra("onnxruntime", "export")
extra("litserve", "serve")

QUIET = "--trainer.enable_progress_bar=false"


def main_here(workdir: Path, *args: str) -> None:
    """`python main.py ARGS` in this process, in `workdir` (logs under workdir/logs)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setattr(sys, "argv", [str(MAIN), *args, QUIET])
        runpy.run_path(str(MAIN), run_name="__main__")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose logs/ hold one short run's checkpoints, and its ONNX export."""
    workdir = tmp_path_factory.mktemp("example_shipping")
    main_here(workdir, "fit", "--trainer.max_epochs=1", "--trainer.limit_train_batches=5")
    main_here(workdir, "export", "--ckpt_path=best")
    return workdir


def test_export_writes_onnx_beside_the_run_with_what_a_user_needs_to_feed_it(workdir):
    (checkpoint,) = workdir.glob("logs/lightning_logs/version_0/checkpoints/best-*.ckpt")
    exported = checkpoint.parents[1] / "export" / f"{checkpoint.stem}.onnx"
    metadata = json.loads(exported.with_name(exported.name + ".json").read_text())
    assert metadata["input"]["shape"] == [None, 1, 8, 8] and metadata["num_classes"] == 10
    assert metadata["preprocessing"] == DigitsDataModule.preprocessing
    assert metadata["checkpoint"] == str(checkpoint.resolve())
    assert metadata["parity"]["max_abs_error"] <= 1e-4 and metadata["parity"]["inputs"] == 64


def your_images(path: Path, count: int = 16) -> np.ndarray:
    """`count` digits as a user's file would hold them: an .npz with images only, no labels."""
    images = (load_digits().images[-count:, None] / 16).astype(np.float32)
    np.savez(path, images=images)
    return images


def read_predictions(workdir: Path) -> list[dict[str, str]]:
    newest = max(
        workdir.glob("logs/lightning_logs/version_*/predictions.csv"), key=lambda p: p.stat().st_mtime
    )
    with newest.open(newline="") as file:
        return list(csv.DictReader(file))


def test_predict_refuses_a_file_of_the_wrong_shape_in_one_line(workdir, capsys):
    np.savez(workdir / "flat.npz", images=np.zeros((3, 64), dtype=np.float32))
    with pytest.raises(SystemExit) as exit_info:
        main_here(workdir, "predict", "--ckpt_path=best", f"--data.predict_path={workdir / 'flat.npz'}")
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(error) == 1, error
    assert (
        "holds images (3, 64); the model takes an .npz file with an array 'images' (N, 1, 8, 8)" in error[0]
    )


def test_serve_needs_one_model_said_in_one_line(workdir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main_here(workdir, "serve")
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and error == [
        "error: serve needs one model: --ckpt_path=best|last|PATH or --exported=FILE"
    ]


@pytest.mark.slow
def test_predict_on_your_file_and_the_served_export_give_the_same_answers(workdir):
    images = your_images(workdir / "mine.npz")
    main_here(workdir, "predict", "--ckpt_path=best", f"--data.predict_path={workdir / 'mine.npz'}")
    predictions = read_predictions(workdir)
    assert [row["index"] for row in predictions] == [str(i) for i in range(len(images))]
    assert set(predictions[0]) == {"index", "predicted", "confidence"}  # no labels, no target column

    (exported,) = workdir.glob("logs/lightning_logs/version_0/export/best-*.onnx")
    port = free_port()
    server = main_py_started(workdir, "serve", f"--exported={exported}", f"--port={port}", QUIET)
    try:
        url = wait_until_serving(server, port)
        bodies = [{"input": image.tolist()} for image in images]
        single = [post_json(url, body) for body in bodies[:4]]
        with ThreadPoolExecutor(8) as pool:
            concurrent = list(pool.map(lambda body: post_json(url, body), bodies))
        wrong_shape = post_json(url, {"input": images[0, 0].tolist()})
    finally:
        stop_server(server)
    for (status, answer), row in zip([*single, *concurrent], [*predictions[:4], *predictions], strict=True):
        assert status == 200, answer
        assert answer["class"] == int(row["predicted"])
        assert answer["confidence"] == pytest.approx(float(row["confidence"]), abs=2e-4)  # csv: 4 decimals
    assert wrong_shape[0] == 400
    assert wrong_shape[1]["error"].startswith('"input" has shape [8, 8]; expected [1, 8, 8]')
