"""`export` and `serve` on the kit's own fixtures: exported files that match the model, a server
that answers like it, and one line for every mistake.

One checkpoint, trained once for the whole module, is exported and served by every test.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from {{ cookiecutter.package_name }}.kit.export import FORMATS, ExportError, export, load

from kit_fixtures import CLASS_NAMES, EXTRA, FEATURES, TinyModel, TinyNamedInputs, TinyRegressor
from kit_testing import (
    QUICK,
    extra,
    free_port,
    post_json,
    run_fixtures_here,
    start_fixtures,
    stop_server,
    wait_until_serving,
)

extra("onnxruntime", "export")
extra("litserve", "serve")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder holding one epoch's best-*.ckpt."""
    workdir = tmp_path_factory.mktemp("shipping")
    with pytest.MonkeyPatch.context() as patch:
        run_fixtures_here(
            patch, "fit", "--trainer.max_epochs=1", f"--trainer.default_root_dir={workdir}", *QUICK
        )
    return workdir


def checkpoint_in(workdir: Path) -> Path:
    (checkpoint,) = workdir.glob("lightning_logs/version_0/checkpoints/best-*.ckpt")
    return checkpoint


def model_answers(workdir: Path, inputs: Tensor) -> Tensor:
    """The trained model's own outputs, loaded the way Lightning documents."""
    model = TinyModel.load_from_checkpoint(checkpoint_in(workdir), map_location="cpu").eval()
    with torch.no_grad():
        return model(inputs)


def export_here(monkeypatch: pytest.MonkeyPatch, workdir: Path, *flags: str) -> None:
    run_fixtures_here(monkeypatch, "export", f"--trainer.default_root_dir={workdir}", *flags)


@pytest.mark.parametrize("format", list(FORMATS))
def test_export_writes_a_file_that_matches_the_model_at_any_batch_size(format, trained, monkeypatch, capsys):
    export_here(monkeypatch, trained, "--ckpt_path=best", f"--format={format}")
    (exported,) = (trained / "lightning_logs/version_0/export").glob(f"best-*{FORMATS[format]}")
    assert f"Exported {exported}" in capsys.readouterr().out
    metadata = json.loads(exported.with_name(exported.name + ".json").read_text())
    assert metadata["format"] == format
    assert metadata["input"]["shape"] == [None, FEATURES] and metadata["inputs"] == [metadata["input"]]
    assert metadata["output"] == {"name": "output", "shape": [None, 3], "dtype": "float32"}
    assert (metadata["num_classes"], metadata["class_names"]) == (3, list(CLASS_NAMES))  # declared
    assert Path(metadata["checkpoint"]) == checkpoint_in(trained).resolve()
    assert metadata["parity"]["max_abs_error"] <= metadata["parity"]["tolerance"] == 1e-4
    # Loaded back on its own, on batch sizes it was not exported with.
    run = load(exported)
    for batch in (1, 5, 37):
        inputs = torch.randn(batch, FEATURES, generator=torch.Generator().manual_seed(batch))
        torch.testing.assert_close(run(inputs), model_answers(trained, inputs), atol=1e-4, rtol=0)
    assert not list(exported.parent.glob(".*")), "a temporary file was left behind"


class DriftsWhenTraced(nn.Module):
    """A forward that takes another branch when traced: its TorchScript export cannot match it."""

    def forward(self, inputs: Tensor) -> Tensor:
        return inputs + 1.0 if torch.jit.is_tracing() else inputs


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_an_export_that_does_not_match_is_refused_and_nothing_is_written(tmp_path):
    output = tmp_path / "model.pt"
    with pytest.raises(ExportError, match=r"differs from the model by up to 1 on 4 validation inputs"):
        export(DriftsWhenTraced(), torch.zeros(4, 3), "torchscript", output, {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--ckpt_path=best", "--format=tflite"],
            "--format=tflite is not a format we export; use one of onnx",
        ),
        (["--format=onnx"], "export needs trained weights: --ckpt_path=best"),
        (["--ckpt_path=missing.ckpt"], "--ckpt_path=missing.ckpt: no such file"),
    ],
)
def test_export_mistakes_end_in_one_line(flags, message, trained, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        export_here(monkeypatch, trained, *flags)
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(error) == 1 and message in error[0], error


@pytest.mark.parametrize(
    ("command", "missing", "install"),
    [("export", "onnxruntime", "export"), ("serve", "litserve", "serve")],
)
def test_a_missing_optional_dependency_names_its_install(
    command, missing, install, trained, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, missing, None)  # as if not installed: importing it fails
    with pytest.raises(SystemExit) as exit_info:
        run_fixtures_here(monkeypatch, command, "--ckpt_path=best", f"--trainer.default_root_dir={trained}")
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(error) == 1, error
    assert f'({missing} is missing): pip install -e ".[{install}]"' in error[0]


def answers(url: str, samples: Tensor, workers: int) -> list[tuple[int, dict]]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda sample: post_json(url, {"input": sample.tolist()}), samples))


@pytest.mark.slow
def test_serve_answers_like_the_model_alone_and_concurrently_and_refuses_bad_requests(trained):
    """From the checkpoint; the example's tests serve an exported file."""
    model = ["--ckpt_path=best"]
    port = free_port()
    server = start_fixtures(trained, "serve", *model, f"--port={port}", "--max_batch_size=8")
    try:
        url = wait_until_serving(server, port)
        samples = 3 * torch.randn(24, FEATURES, generator=torch.Generator().manual_seed(0))
        probabilities = model_answers(trained, samples).softmax(dim=-1)
        single = answers(url, samples[:4], workers=1)
        concurrent = answers(url, samples, workers=8)
        # Bad requests among good ones: each answered on its own, the others unharmed.
        bad = [{"input": [1.0, 2.0]}, {"inputs": [0.0] * FEATURES}, {"input": ["a"] * FEATURES}, b"{not json"]
        good = [{"input": sample.tolist()} for sample in samples[:4]]
        with ThreadPoolExecutor(8) as pool:
            mixed = list(pool.map(lambda body: post_json(url, body), [*bad, *good]))
        after = answers(url, samples[:2], workers=1)
    finally:
        stopped = stop_server(server)
    assert stopped.returncode in (0, -2, 130), stopped.stderr[-2000:]
    served = [*single, *concurrent, *mixed[len(bad) :], *after]
    expected = [*probabilities[:4], *probabilities, *probabilities[:4], *probabilities[:2]]
    for (status, answer), probability in zip(served, expected, strict=True):
        assert status == 200, answer
        assert answer["class"] == int(probability.argmax())
        assert answer["class_name"] == CLASS_NAMES[answer["class"]]
        assert answer["confidence"] == pytest.approx(float(probability.max()), abs=1e-5)
    for status, answer in mixed[: len(bad)]:
        assert status == 400 and list(answer) == ["error"] and "\n" not in answer["error"], answer
    assert "has shape [2]; expected [4]" in mixed[0][1]["error"]


class RoundingRegressor(TinyRegressor):
    """A regressor with answers of its own: `serve_answers`, the documented hook."""

    def serve_answers(self, outputs: Tensor) -> list[dict]:
        return [{"rounded": round(float(output))} for output in outputs]


def test_each_task_shape_is_answered_in_its_own_terms():
    """A classifier's class, confidence and class name; a regressor's values as they are; a
    module's own `serve_answers` before either; a model of two named inputs, each read from its
    own field. A rejected request keeps its place among the others."""
    from {{ cookiecutter.package_name }}.kit.serving import InputSpec, ModelAPI, Rejected, answers_for

    generator = torch.Generator().manual_seed(0)
    samples, extras = (
        3 * torch.randn(3, FEATURES, generator=generator),
        torch.rand(3, EXTRA, generator=generator),
    )
    point = [InputSpec("input", (FEATURES,))]

    def served(module: nn.Module, inputs: list, requests: list[dict], answers=None) -> list:
        api = ModelAPI(inputs, answers or answers_for(module, None, None), module.eval())
        api.setup("cpu")
        return api.predict(api.batch([api.decode_request(request) for request in requests]))

    def probable(logits: Tensor) -> list[dict]:
        probabilities = logits.softmax(dim=-1)
        return [
            {
                "class": int(p.argmax()),
                "confidence": pytest.approx(float(p.max())),
                "class_name": CLASS_NAMES[p.argmax()],
            }
            for p in probabilities
        ]

    requests = [{"input": sample.tolist()} for sample in samples]
    classifier, regressor, rounding, named = (
        TinyModel(),
        TinyRegressor(),
        RoundingRegressor(),
        TinyNamedInputs(),
    )
    declared = answers_for(classifier, len(CLASS_NAMES), CLASS_NAMES)
    classes = served(classifier, point, [requests[0], {"input": [1.0]}, *requests[1:]], declared)
    assert classes.pop(1) == Rejected(
        '"input" has shape [1]; expected [4]: a JSON object {"input": [...]} holding one sample of shape [4]'
    )
    values = served(regressor, point, requests)
    own = served(rounding, point, requests, answers_for(rounding, len(CLASS_NAMES), CLASS_NAMES))
    both = [InputSpec("x", (FEATURES,)), InputSpec("extra", (EXTRA,))]
    named_requests = [
        {"x": x.tolist(), "extra": extra.tolist()} for x, extra in zip(samples, extras, strict=True)
    ]
    by_name = served(
        named, both, [named_requests[0], {"x": samples[0].tolist()}, *named_requests[1:]], declared
    )
    assert by_name.pop(1).error.startswith(
        'the request body must be a JSON object {"x": [...], "extra": [...]}'
    )
    with torch.no_grad():
        assert classes == probable(classifier(samples))
        assert torch.tensor([answer["output"] for answer in values]).allclose(regressor(samples))
        assert own == [{"rounded": round(float(output))} for output in rounding(samples)]
        assert by_name == probable(named(samples, extras))


def test_a_request_is_read_as_each_input_s_dtype():
    """Whole numbers for an integer input (token ids, say): 2.5 is refused, not rounded."""
    from {{ cookiecutter.package_name }}.kit.serving import InputSpec, Rejected, decode

    ids = [InputSpec("ids", (2,), torch.int64)]
    decoded = decode({"ids": [3, 4]}, ids)
    assert not isinstance(decoded, Rejected) and decoded["ids"].dtype == torch.int64
    assert decoded["ids"].tolist() == [3, 4]
    assert decode({"ids": [3, 2.5]}, ids) == Rejected('"ids" must hold whole numbers (int64)')
    assert decode({"ids": [3, 1e30]}, ids) == Rejected('"ids" must hold whole numbers (int64)')
    too_large = decode({"input": [1e39]}, [InputSpec("input", (1,))])  # beyond float32's range
    assert too_large == Rejected('"input" holds NaN or infinite values')
