"""Bad input, one table per entry point: each mistake ends in one line and exit code 2, and
leaves `logs/` as it was (no new folder, no changed file).

One tiny trained run is shared by every case. Most cases run in this process through the same
functions `python main.py` calls (`cli_main`, the sweep's and the doctor's `main`); a few per
entry point run `python main.py` itself, the honest test of the exit code. Predict files and
serve bodies are generated (hypothesis) rather than listed.
"""

import json
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from {{ cookiecutter.package_name }}.cli import cli_main
from {{ cookiecutter.package_name }}.kit import doctor, sweep

from conftest import MAIN, PROJECT_ROOT, extra, main_py_environment, main_py_process, main_py_started
from kit_testing import free_port, post_json, stop_server, wait_until_serving

SPACE = PROJECT_ROOT / "configs" / "sweep.yaml"
TINY = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)


class BrokenNetwork(nn.Module):
    """A network that fails once it has trained `steps` batches: a fault no constructor check can see."""

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int, steps: int = 0) -> None:
        super().__init__()
        self.layer = nn.Linear(int(np.prod(image_shape)), num_classes)
        self.steps = steps

    def forward(self, images: Tensor) -> Tensor:
        if self.steps == 0:
            raise RuntimeError("broken on purpose")
        self.steps -= self.training
        return self.layer(images.flatten(1))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A working folder holding one trained run (shared by every case) and a few bad files."""
    folder = tmp_path_factory.mktemp("project")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        cli_main(["fit", *TINY])
    (folder / "a_file").write_text("not a folder\n")
    (folder / "binary.yaml").write_bytes(b"\x80\x81\xff\x00")
    (folder / "not_a_checkpoint.ckpt").write_text("hello\n")
    (folder / "a_folder").mkdir()
    np.savez(
        folder / "tiny.npz", images=np.random.default_rng(0).random((60, 1, 1, 1)), labels=np.arange(60) % 2
    )
    yield folder


@pytest.fixture(autouse=True)
def in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)


def snapshot(logs: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under `logs`: a file's size and modification time, a folder's name alone."""
    return {
        str(path.relative_to(logs)): (path.stat().st_size, path.stat().st_mtime_ns)
        if path.is_file()
        else None
        for path in sorted(logs.rglob("*"))
    }


def assert_refused(code: object, stderr: str, naming: str, before: dict, project: Path) -> None:
    """Exit code 2, one `error:` line naming the problem, no traceback, `logs/` unchanged."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2, stderr[-3000:]
    assert "Traceback" not in stderr and len(errors) == 1, stderr[-3000:]
    assert naming in errors[0], errors[0]
    assert snapshot(project / "logs") == before, "a refusal wrote into logs/"


def refused_here(
    project: Path, capsys: pytest.CaptureFixture[str], naming: str, call: Callable[[], object]
) -> None:
    """`call` (an entry point's main function, in this process) is refused as `python main.py` would be."""
    before = snapshot(project / "logs")
    capsys.readouterr()
    try:
        code = call()
    except SystemExit as stop:
        code = stop.code
    assert_refused(code, capsys.readouterr().err, naming, before, project)


def refused_by_main_py(project: Path, naming: str, *args: str) -> None:
    """`python main.py ARGS` in a process of its own is refused."""
    before = snapshot(project / "logs")
    result = main_py_process(project, *args, timeout=120)
    assert_refused(result.returncode, result.stderr, naming, before, project)


# --- fit, validate, test, export, serve: LightningCLI's subcommands ----------------------------------
# name: (arguments, what the one line must name)
LIGHTNING = {
    "fit: zero width": (["fit", "--model.network.init_args.width=0"], "--model.network.width"),
    "fit: dropout 1": (["fit", "--model.network.init_args.dropout=1"], "--model.network.dropout"),
    "fit: batch size 0": (["fit", "--data.batch_size=0"], "--data.batch_size"),
    "fit: val fraction 2": (["fit", "--data.val_fraction=2"], "--data.val_fraction"),
    "fit: no training data": (
        ["fit", "--data.val_fraction=0.5", "--data.test_fraction=0.5"],
        "must be below 1",
    ),
    "fit: images too small": (["fit", "--data.data_path=tiny.npz"], "1x1 images are too small"),
    "fit: missing data file": (["fit", "--data.data_path=missing.npz"], "missing.npz"),
    "fit: root dir below a file": (["fit", "--trainer.default_root_dir=a_file/runs"], "a_file is a file"),
    "fit: binary -c file": (["fit", "-c", "binary.yaml"], "binary.yaml is not a text"),
    "fit: missing -c file": (["fit", "-c", "missing.yaml"], "missing.yaml"),
    "fit: misspelt flag": (["fit", "--trainer.max_epoch=1"], "max_epoch"),
    "fit: unknown accelerator": (["fit", "--trainer.accelerator=banana"], "banana"),
    "fit: devices not a count": (["fit", "--trainer.devices=abc"], "--trainer.devices='abc'"),
    "validate: no run to be best": (
        ["validate", "--ckpt_path=best", "--trainer.default_root_dir=a_folder"],
        "--ckpt_path=best",
    ),
    "validate: missing checkpoint": (["validate", "--ckpt_path=missing.ckpt"], "missing.ckpt"),
    "test: not a checkpoint": (["test", "--ckpt_path=not_a_checkpoint.ckpt"], "not_a_checkpoint.ckpt"),
    "test: root dir is a file": (["test", "--ckpt_path=best", "--trainer.default_root_dir=a_file"], "a_file"),
    "test: batch size auto": (["test", "--ckpt_path=best", "--data.batch_size=auto"], "batch_size"),
    "predict: missing file": (["predict", "--ckpt_path=best", "--data.predict_path=nope.npz"], "nope.npz"),
    "export: no checkpoint": (["export"], "--ckpt_path"),
    "export: unknown format": (["export", "--ckpt_path=best", "--format=xyz"], "--format=xyz"),
    "export: output is a folder": (["export", "--ckpt_path=best", "--output=a_folder"], "--output=a_folder"),
    "export: output below a file": (["export", "--ckpt_path=best", "--output=a_file/net.onnx"], "a_file"),
    "serve: no model": (["serve"], "--ckpt_path"),
    "serve: privileged port": (["serve", "--ckpt_path=best", "--port=80"], "--port=80"),
    "serve: no request fits": (["serve", "--ckpt_path=best", "--max_request_bytes=0"], "--max_request_bytes"),
}


@pytest.mark.parametrize("case", LIGHTNING.values(), ids=LIGHTNING.keys())
def test_lightning_subcommands_refuse_in_one_line(project, capsys, case):
    args, naming = case
    refused_here(project, capsys, naming, lambda: cli_main([*args, *TINY[1:]]))


def test_a_port_in_use_is_refused_before_serving(project):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused_by_main_py(project, f"--port={port}", "serve", "--ckpt_path=best", f"--port={port}")


def test_fit_refuses_a_bad_setting_in_one_line_from_main_py(project):
    refused_by_main_py(project, "--data.val_fraction", "fit", "--data.val_fraction=-1")


def test_a_network_failing_in_its_first_forward_leaves_no_run_behind(project):
    """The rule: a new run that fails before its first checkpoint has its folder removed (no
    checkpoint, no config.yaml, no events), so `--ckpt_path=best|last` still find the trained run."""
    before = snapshot(project / "logs")
    with pytest.raises(RuntimeError, match="broken on purpose"):
        cli_main(["fit", f"--model.network={__name__}.BrokenNetwork", *TINY])
    assert snapshot(project / "logs") == before
    # A root folder the run made for itself goes too, up to the first folder that was there.
    with pytest.raises(RuntimeError, match="broken on purpose"):
        cli_main(
            ["fit", f"--model.network={__name__}.BrokenNetwork", "--trainer.default_root_dir=new/runs", *TINY]
        )
    assert not (project / "new").exists()


def test_a_run_that_failed_after_training_a_step_keeps_its_folder(project):
    with pytest.raises(RuntimeError, match="broken on purpose"):
        network = [f"--model.network={__name__}.BrokenNetwork", "--model.network.init_args.steps=1"]
        cli_main(["fit", *network, "--trainer.default_root_dir=kept", *TINY])
    run = project / "kept" / "lightning_logs" / "version_0"
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    shutil.rmtree(project / "kept")


# --- predict: generated files ---------------------------------------------------------------------

IMAGES = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)


def bad_predict_files() -> st.SearchStrategy[tuple[str, dict[str, np.ndarray] | bytes]]:
    """(kind, content): arrays to save as .npz, or raw bytes, that `predict` must refuse."""
    count = st.integers(0, 4)
    shapes = st.lists(st.integers(0, 9), min_size=1, max_size=5).filter(lambda shape: shape[1:] != [1, 8, 8])
    return st.one_of(
        st.builds(lambda n: ("zero images", {"images": IMAGES[:0].reshape(0, 1, 8, 8)}), count),
        st.builds(lambda s: ("wrong shape", {"images": np.zeros(s, np.float32)}), shapes),
        st.builds(
            lambda n, value: (
                "non-finite",
                {"images": np.where(np.arange(3)[:, None, None, None] == n % 3, value, IMAGES)},
            ),
            count,
            st.sampled_from([np.nan, np.inf, -np.inf]),
        ),
        st.builds(lambda n: ("strings", {"images": np.full((max(n, 1), 1, 8, 8), "x")}), count),
        st.builds(lambda name: ("wrong name", {name: IMAGES}), st.sampled_from(["x", "image", "inputs"])),
        st.builds(lambda data: ("not npz", data), st.binary(max_size=64)),
        st.builds(
            lambda n: ("0-255 floats", {"images": np.full((max(n, 1), 1, 8, 8), 200.0, np.float32)}), count
        ),
        st.builds(
            lambda n: ("ints above 255", {"images": np.full((max(n, 1), 1, 8, 8), 300, np.int32)}), count
        ),
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=bad_predict_files())
def test_predict_refuses_a_bad_file_naming_it(project, capsys, case):
    _kind, content = case
    path = project / "inputs.npz"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        with path.open("wb") as file:
            np.savez(file, **content)
    args = ["predict", "--ckpt_path=best", f"--data.predict_path={path}", *TINY[3:]]
    refused_here(project, capsys, str(path), lambda: cli_main(args))


def test_predict_on_zero_images_is_refused_by_main_py(project):
    path = project / "empty.npz"
    np.savez(path, images=IMAGES[:0])
    refused_by_main_py(
        project,
        f"predict file {path}: holds no samples",
        "predict",
        "--ckpt_path=best",
        f"--data.predict_path={path}",
    )


# --- sweep ------------------------------------------------------------------------------------------

FIT_COMMAND = [sys.executable, str(MAIN), "fit"]


def test_sweep_refuses_in_one_line(project, capsys):
    extra("optuna", "sweep")
    bad_space = project / "space.yaml"
    bad_space.write_text("params: [unclosed\n")
    for argv, naming in [
        (["--n_trials=0"], "--n_trials"),
        (["--n_trials=-3"], "--n_trials"),
        ([f"--space={project / 'none.yaml'}"], "none.yaml"),
        ([f"--space={bad_space}"], "space.yaml"),
        ([f"--space={SPACE}", "--n_trials=1", "--storage=not-a-url"], "--storage"),
    ]:
        refused_here(project, capsys, naming, lambda argv=argv: sweep.main(FIT_COMMAND, argv))


def test_a_damaged_sweep_journal_is_named_and_left_as_it_is(project, capsys, monkeypatch):
    extra("optuna", "sweep")
    journal = project / "logs" / "sweeps" / "damaged" / "journal.log"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"op_code": 0, "worker_id": "w"\ngarbage\n')
    monkeypatch.setenv("PYTHONPATH", main_py_environment()["PYTHONPATH"])
    argv = [f"--space={SPACE}", "--study=damaged", "--n_trials=1", *TINY]
    refused_here(
        project,
        capsys,
        f"journal {Path('logs/sweeps/damaged/journal.log')} is damaged",
        lambda: sweep.main(FIT_COMMAND, argv),
    )
    assert journal.read_text().endswith("garbage\n")


def test_sweep_and_doctor_refuse_in_one_line_from_main_py(project):
    refused_by_main_py(project, "--n_trials must be 1 or more", "sweep", "--n_trials=0")
    refused_by_main_py(project, "--bogus", "doctor", "--bogus")


def test_doctor_refuses_in_one_line(project, capsys):
    refused_here(project, capsys, "--bogus", lambda: doctor.main(["--bogus"]))
    refused_here(project, capsys, "'xpu'", lambda: doctor.main(["--accelerator=xpu"]))


# --- serve: generated bodies ------------------------------------------------------------------------

CAP = 4096  # the server's --max_request_bytes in these tests


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[str]:
    extra("litserve", "serve")
    port = free_port()
    process = main_py_started(
        project, "serve", "--ckpt_path=best", f"--port={port}", f"--max_request_bytes={CAP}"
    )
    try:
        yield wait_until_serving(process, port)
    finally:
        stop_server(process)


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=9) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=40,
)
bad_bodies = st.one_of(
    st.builds(lambda value: json.dumps({"input": value}).encode(), json_values),
    st.builds(lambda value: json.dumps(value).encode(), json_values),
    st.binary(max_size=64),
    st.integers(CAP + 1, 4 * CAP).map(lambda size: b"[" + b"0," * (size // 2) + b"0]"),  # over the cap
)
GOOD = {"input": IMAGES[0].tolist()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bad_bodies)
def test_serve_answers_a_bad_body_in_one_line_and_the_next_request_at_once(server, body):
    status, answer = post_json(server, body, timeout=10)
    if status == 200:  # a generated body that happens to be one valid sample
        assert json.loads(body)["input"] is not None
    else:
        expected = 413 if len(body) > CAP else 400
        assert status == expected and list(answer) == ["error"] and "\n" not in answer["error"], answer
    status, answer = post_json(server, GOOD, timeout=5)
    assert status == 200 and 0 <= answer["class"] <= 9, answer


def test_a_body_sent_in_chunks_is_capped_too(server):
    import http.client
    from urllib.parse import urlparse

    url = urlparse(server)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    chunks = [b"[" + b"0," * 1000] * 4 + [b"0]"]  # no Content-Length: the server counts what arrives
    connection.request(
        "POST", url.path, body=iter(chunks), headers={"Content-Type": "application/json"}, encode_chunked=True
    )
    response = connection.getresponse()
    assert response.status == 413 and "--max_request_bytes" in json.loads(response.read())["error"]
    connection.close()
    assert post_json(server, GOOD, timeout=5)[0] == 200


def test_a_sample_of_the_right_shape_holding_nan_is_refused(server):
    body = json.dumps({"input": np.full((1, 8, 8), np.nan).tolist()}).encode()  # json writes NaN
    status, answer = post_json(server, body, timeout=5)
    assert status == 400 and answer["error"] == '"input" holds NaN or infinite values', answer
