"""Serve a model over HTTP with LitServe: one JSON sample in, the model's answer out.

    POST /predict  {"input": [...]}   a nested array of the model's input shape (no batch dimension)
                   {"x": [...], "extra": [...]}   a model of several inputs: each under its name
    200            {"class": 3, "confidence": 0.9871}   a classifier (and "class_name" when named)
                   {"output": [0.42]}                    any other model: `forward`'s values
    400            {"error": "input has shape [8, 8]; expected [1, 8, 8] ..."}   one line
    413            {"error": "the request body is over 10000000 bytes ..."}    (`max_request_bytes`)

The model is a trained module or a file written by `export`. What `forward` gives becomes the
answers here: a LightningModule's own `serve_answers(outputs)` when it defines one (a batch of
outputs in, one JSON-ready dict per sample out), else class and confidence (a softmax) for a model
that declares classes (class names, or a `num_classes` hyperparameter; an export's metadata), else
the values as they are.
LitServe gathers concurrent requests into batches (`max_batch_size`, waiting at most
`batch_timeout` seconds for one to fill). A bad request is answered on its own: the others in
its batch still get their predictions, and the server keeps serving. No client can stall the
others: a body is refused as soon as more than `max_request_bytes` of it has arrived (LitServe's
`max_payload_size`), and decoding a sample never looks at more numbers than the model's input
holds (its nesting is checked level by level first).

Imports LitServe: import this module only once `export.require(("litserve",), ...)` passed.
"""

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import litserve as ls
import torch
from fastapi import Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from torch import Tensor, nn

from .export import Runner, load


@dataclass
class Rejected:
    """A request that cannot be run, with the one line that says why."""

    error: str


# One request's sample: a tensor per input of `forward`, by name.
Sample = dict[str, Tensor]


@dataclass
class Batch:
    """The requests LitServe gathered: the valid ones stacked, the rejected kept in place."""

    items: list[Sample | Rejected]


@dataclass(frozen=True)
class InputSpec:
    """One input of `forward`: the request field that holds it, one sample's shape, its dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @classmethod
    def of(cls, name: str, batch: Tensor) -> "InputSpec":
        """The input that `batch` (a batch of it, as the validation loader gives) is one of."""
        return cls(name, tuple(batch.shape[1:]), batch.dtype)

    @classmethod
    def described(cls, entry: dict[str, Any]) -> "InputSpec":
        """From an export's metadata: {"name": ..., "shape": [null, ...], "dtype": "float32"}."""
        return cls(entry["name"], tuple(entry["shape"][1:]), getattr(torch, entry["dtype"]))


# A batch of `forward`'s outputs in, one JSON-ready answer per sample out.
Answers = Callable[[Tensor], list[dict[str, Any]]]


@dataclass(frozen=True)
class ClassAnswers:
    """A classifier's answers: the most probable class and its softmax probability (and name).
    A class, not a closure: LitServe sends the API to its worker process by pickling it."""

    class_names: Sequence[str] | None = None

    def __call__(self, logits: Tensor) -> list[dict[str, Any]]:
        confidence, predicted = logits.float().softmax(dim=-1).max(dim=-1)
        return [self.answer(int(c), float(p)) for c, p in zip(predicted, confidence, strict=True)]

    def answer(self, predicted: int, confidence: float) -> dict[str, Any]:
        named = {"class_name": self.class_names[predicted]} if self.class_names else {}
        return {"class": predicted, "confidence": confidence, **named}


def value_answers(outputs: Tensor) -> list[dict[str, Any]]:
    """Any other model's answers: each sample's output values, as they are."""
    return [{"output": sample.tolist()} for sample in outputs.float()]


def answers_for(
    module: nn.Module | None, num_classes: int | None, class_names: Sequence[str] | None
) -> Answers:
    """The module's own `serve_answers` if it has one, else class answers where classes are
    declared, else the values."""
    own = getattr(module, "serve_answers", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    return ClassAnswers(class_names) if num_classes else value_answers


class ModelAPI(ls.LitAPI):
    """A model behind LitServe: requests decoded one by one, run in batches, answered one by one."""

    def __init__(
        self,
        inputs: Sequence[InputSpec],
        answers: Answers,
        module: nn.Module | None = None,
        exported: Path | None = None,
        max_batch_size: int = 16,
        batch_timeout: float = 0.005,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.inputs = list(inputs)
        self.answers = answers
        self.module = module
        self.exported = exported

    def setup(self, device: str) -> None:  # in each worker process
        if multiprocessing.parent_process() is not None:
            # Ctrl-C reaches every process of the terminal's group: the main process stops this
            # worker itself once it has shut the server down, so the worker need not (nor print why).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if self.module is not None:
            module = self.module.to(device).eval()

            def run_module(*inputs: Tensor) -> Tensor:
                with torch.no_grad():
                    return module(*(tensor.to(device) for tensor in inputs))

            self.run: Runner = run_module
        else:
            assert self.exported is not None
            self.run = load(self.exported)

    def decode_request(self, request: dict) -> Sample | Rejected:  # type: ignore[override]
        return decode(request, self.inputs)

    def batch(self, inputs: list[Sample | Rejected]) -> Batch:
        return Batch(inputs)

    def predict(self, inputs: Batch | Sample | Rejected) -> list[dict[str, Any] | Rejected]:
        items = inputs.items if isinstance(inputs, Batch) else [inputs]
        valid = [item for item in items if not isinstance(item, Rejected)]
        answers: list[dict[str, Any]] = []
        if valid:
            stacked = [torch.stack([sample[spec.name] for sample in valid]) for spec in self.inputs]
            answers = self.answers(self.run(*stacked).detach().cpu())
        found = iter(answers)
        results = [item if isinstance(item, Rejected) else next(found) for item in items]
        return results if isinstance(inputs, Batch) else results[0]  # type: ignore[return-value]

    def unbatch(self, outputs: list[dict[str, Any] | Rejected]) -> list[dict[str, Any] | Rejected]:
        return outputs

    def encode_response(self, output: dict[str, Any] | Rejected):  # type: ignore[no-untyped-def]
        if isinstance(output, Rejected):
            return JSONResponse(status_code=400, content={"error": output.error})
        return output


def decode(request: Any, inputs: Sequence[InputSpec]) -> Sample | Rejected:
    """The sample in a request body (a tensor per input), or why it cannot be one."""
    body = "{" + ", ".join(f'"{spec.name}": [...]' for spec in inputs) + "}"
    shapes = "; ".join(f"{spec.name} of shape {list(spec.shape)}" for spec in inputs)
    expected = f"a JSON object {body} holding one sample ({shapes})"
    if len(inputs) == 1:
        expected = f"a JSON object {body} holding one sample of shape {list(inputs[0].shape)}"
    if not isinstance(request, dict) or any(spec.name not in request for spec in inputs):
        return Rejected(f"the request body must be {expected}")
    sample: Sample = {}
    for spec in inputs:
        value = decode_value(request[spec.name], spec, expected)
        if isinstance(value, Rejected):
            return value
        sample[spec.name] = value
    return sample


def decode_value(value: Any, spec: InputSpec, expected: str) -> Tensor | Rejected:
    """One input's value as a tensor of its dtype, or why not (a wrong form says what is expected)."""
    name, shape = f'"{spec.name}"', list(spec.shape)
    problem = misfit(value, spec.shape)
    if problem is not None:
        return Rejected(f"{name} {problem}; expected {shape}: {expected}")
    try:
        tensor = torch.tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return Rejected(f"{name} must be a nested array of numbers: {expected}")
    if list(tensor.shape) != shape:
        return Rejected(f"{name} has shape {list(tensor.shape)}; expected {shape}: {expected}")
    converted = tensor.to(spec.dtype)
    if not bool(torch.isfinite(converted).all()):  # NaN, or too large for a float32
        return Rejected(f"{name} holds NaN or infinite values")
    if not spec.dtype.is_floating_point and not bool((converted.to(torch.float64) == tensor).all()):
        return Rejected(f"{name} must hold whole numbers ({str(spec.dtype).removeprefix('torch.')})")
    return converted


def misfit(value: Any, shape: tuple[int, ...]) -> str | None:
    """None where `value` is lists nested as `shape` says; else what it is instead.

    Level by level, stopping at the first list of another length: the work is bounded by the
    expected sample's size, however large or deep the value sent.
    """
    items = [value]
    for size in shape:
        if not all(isinstance(item, list) and len(item) == size for item in items):
            break
        items = [inner for item in items for inner in item]
    else:
        if not any(isinstance(item, list | dict) for item in items):
            return None
    found: list[int] = []
    inner = value
    while isinstance(inner, list) and len(found) <= len(shape):  # the shape along the first items
        found.append(len(inner))
        inner = inner[0] if inner else None
    if not found and not isinstance(value, int | float):
        return "is not a nested array of numbers"
    return f"has shape {found}" if found != list(shape) else "is ragged: its lists differ in length"


def serve(
    inputs: Sequence[InputSpec],
    answers: Answers,
    module: nn.Module | None = None,
    exported: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    accelerator: str = "auto",
    max_batch_size: int = 16,
    batch_timeout: float = 0.005,
    max_request_bytes: int = 10_000_000,
) -> None:
    """Serve until Ctrl-C or SIGTERM, which both stop LitServe's worker processes too.

    The settings are checked first by `KitTrainer.serve` (`kit.trainer.check_serving`)."""
    api = ModelAPI(inputs, answers, module, exported, max_batch_size, batch_timeout)
    if exported is not None:
        accelerator = "cpu"  # exported files run on the CPU here
    server = ls.LitServer(
        api,
        accelerator=accelerator,
        devices=1,
        workers_per_device=1,
        timeout=30,
        max_payload_size=max_request_bytes,  # answered 413 once more has arrived (LitServe's middleware)
    )

    async def unreadable(request: Request, error: RequestValidationError) -> JSONResponse:
        # A body that is not a JSON object: FastAPI's 422 with a list of details, as one line.
        if "json" not in request.headers.get("content-type", ""):
            problem = "send it with the header Content-Type: application/json"
        else:
            problem = "; ".join(str(detail.get("msg", detail)) for detail in error.errors())
        return JSONResponse(
            status_code=400, content={"error": f"the request body must be a JSON object: {problem}"}
        )

    async def not_json(request: Request, error: HTTPException) -> Response:
        # FastAPI's 400 for a body that is not even text and LitServe's 413 ({"detail": ...}): ours
        # has "error", as above, and says what to do.
        if error.status_code == 413:
            too_large = (
                f"the request body is over {max_request_bytes} bytes (--max_request_bytes): send one sample"
            )
            return JSONResponse(status_code=413, content={"error": too_large})
        if error.status_code != 400:
            return await http_exception_handler(request, error)
        return JSONResponse(
            status_code=400, content={"error": "the request body must be a JSON object: it is not UTF-8 JSON"}
        )

    server.app.add_exception_handler(RequestValidationError, unreadable)
    server.app.add_exception_handler(HTTPException, not_json)
    received = stop_on_signals()
    shapes = ", ".join(f"{spec.name} {list(spec.shape)}" for spec in inputs)
    print(f"Serving on http://{host}:{port}/predict (inputs: {shapes}); Ctrl-C stops")
    server.run(host=host, port=port, generate_client_file=False)  # no client.py in the working folder
    if received:  # LitServe has shut down gracefully and logged it: one line, and the signal's exit code
        print(f"Stopped serving ({signal.Signals(received[0]).name}).", file=sys.stderr)
        raise SystemExit(128 + received[0])


def stop_on_signals() -> list[int]:
    """Ctrl-C and SIGTERM stop the server quietly, its worker processes with it; the signals received.

    SIGTERM (a scheduler, `kill`) stops it as Ctrl-C does, and so does SIGINT even where a shell
    started it in the background (which ignores SIGINT). In this process the first signal becomes
    the KeyboardInterrupt on which LitServe shuts down; a second one, during that shutdown, waits
    for it. LitServe's HTTP server process, forked from this one, inherits the handler: uvicorn
    re-raises the signal it handled once it has stopped (or a second one arrives), and the process
    then exits at once, without a traceback.
    """
    received: list[int] = []
    main_process = os.getpid()

    def stop(signum: int, frame: object) -> None:
        if os.getpid() != main_process:  # uvicorn's process, stopped: exit now, whatever runs
            # (a SystemExit raised inside its event loop would be logged as a traceback)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    return received
