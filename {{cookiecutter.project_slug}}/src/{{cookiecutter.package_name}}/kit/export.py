"""Export a trained module's `forward` to ONNX, a `torch.export` program or TorchScript.

The module is written in eval mode with a dynamic batch dimension, first to a hidden temporary
file. That file is loaded back with the runtime that will run it (onnxruntime,
`torch.export.load`, `torch.jit.load`) and fed a batch of real validation inputs, and a single
one of them; only when its outputs match the module's within the tolerance is it renamed into
place, with `<file>.json` beside it: the inputs' and the output's names, shapes and dtypes, the
classes if the data declares them, the preprocessing the model expects and the checkpoint it
came from. A failed export leaves nothing half-written.
"""

import importlib
import inspect
import json
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from .errors import KitError
from .files import partial_file, write_atomically

# Format name -> file suffix. TorchScript is deprecated by PyTorch (2.10+): prefer the others.
FORMATS = {"onnx": ".onnx", "exported_program": ".pt2", "torchscript": ".pt"}
# What a format needs beyond torch, and the project's optional extra that installs it.
NEEDS = {"onnx": ("onnx", "onnxscript", "onnxruntime")}
# Largest absolute difference allowed between the exported model's outputs and the module's.
TOLERANCE = 1e-4

# The model's inputs by name, in `forward`'s order: `input` alone for a one-tensor model.
Inputs = dict[str, Tensor]
Runner = Callable[..., Tensor]  # the exported model: its inputs, positionally, to its output


class ExportError(KitError):
    """An export that cannot be done or did not match; the message names the problem and the fix."""


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ExportError(f"--format={format} is not a format we export; use one of {', '.join(FORMATS)}")


def require(modules: tuple[str, ...], purpose: str, extra: str) -> None:
    """Import `modules`, or stop with one line naming the install."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise ExportError(
                f'{purpose} needs {", ".join(modules)} ({name} is missing): pip install -e ".[{extra}]"'
            ) from None


def default_output(checkpoint: Path, format: str) -> Path:
    """`<run folder>/export/<checkpoint name><suffix>`: beside the run the checkpoint came from."""
    folder = checkpoint.resolve().parent
    run_folder = folder.parent if folder.name == "checkpoints" else folder
    return run_folder / "export" / f"{checkpoint.stem}{FORMATS[format]}"


def metadata_path(output: Path) -> Path:
    return output.with_name(output.name + ".json")


def model_inputs(batch: Any, module: nn.Module) -> Inputs:
    """The model's inputs in a batch: the batch itself, its first element (images, labels), or,
    in a dict batch, the entries `forward` takes by name (`x`, `extra`; not `target`)."""
    if isinstance(batch, dict):
        names = [name for name in inspect.signature(module.forward).parameters if name in batch]
        if names and all(isinstance(batch[name], Tensor) for name in names):
            return {name: batch[name] for name in names}
    inputs = batch[0] if isinstance(batch, list | tuple) and batch else batch
    if not isinstance(inputs, Tensor):
        raise ExportError(
            f"cannot tell the model's input in a validation batch of type {type(batch).__name__}: "
            "export and serve expect a tensor, a tuple/list whose first element is the input tensor, "
            "or a dict of tensors named like forward's arguments"
        )
    return {"input": inputs}


@contextmanager
def quiet_exporters() -> Iterator[None]:
    """Silence the exporters' progress lines and TorchScript's deprecation warning."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")
            yield
    finally:
        logger.setLevel(level)


def batch_dim() -> Any:
    return torch.export.Dim("batch")


def write_onnx(module: nn.Module, inputs: Inputs, path: Path) -> None:
    torch.onnx.export(
        module,
        tuple(inputs.values()),
        str(path),
        dynamo=True,
        external_data=False,  # one file, weights inside
        input_names=list(inputs),
        output_names=["output"],
        dynamic_shapes=tuple({0: batch_dim()} for _ in inputs),
        verbose=False,
    )


def write_exported_program(module: nn.Module, inputs: Inputs, path: Path) -> None:
    dynamic = tuple({0: batch_dim()} for _ in inputs)
    program = torch.export.export(module, tuple(inputs.values()), dynamic_shapes=dynamic)
    torch.export.save(program, str(path))


def write_torchscript(module: nn.Module, inputs: Inputs, path: Path) -> None:
    # Tracing, not scripting: it works for any module whose forward takes tensors. Lightning's
    # own `to_torchscript` for a LightningModule (plain tracing trips over its `trainer` property).
    if isinstance(module, L.LightningModule):
        traced = module.to_torchscript(method="trace", example_inputs=tuple(inputs.values()))
    else:
        traced = torch.jit.trace(module, tuple(inputs.values()))
    torch.jit.save(traced, str(path))


WRITERS: dict[str, Callable[[nn.Module, Inputs, Path], None]] = {
    "onnx": write_onnx,
    "exported_program": write_exported_program,
    "torchscript": write_torchscript,
}


def load(path: Path, format: str | None = None) -> Runner:
    """A function running the exported model at `path` on a CPU batch (format from the suffix)."""
    format = format or next((name for name, suffix in FORMATS.items() if path.name.endswith(suffix)), "")
    if not path.is_file():
        raise ExportError(f"exported model {path} does not exist: export one with `python main.py export`")
    check_format(format)
    if format == "onnx":
        require(NEEDS["onnx"], "running an ONNX model", "export")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [entry.name for entry in session.get_inputs()]

        def run_onnx(*inputs: Tensor) -> Tensor:
            feed = {name: tensor.cpu().numpy() for name, tensor in zip(names, inputs, strict=True)}
            return torch.from_numpy(session.run(None, feed)[0])

        return run_onnx
    with quiet_exporters():
        if format == "exported_program":
            module = torch.export.load(str(path)).module()
        else:
            module = torch.jit.load(str(path), map_location="cpu")

    def run_torch(*inputs: Tensor) -> Tensor:
        with torch.no_grad():
            return module(*(tensor.cpu() for tensor in inputs))

    return run_torch


def parity_error(module: nn.Module, runner: Runner, inputs: Inputs) -> float:
    """Largest absolute difference between `runner`'s and `module`'s outputs, on `inputs` and on
    their first sample alone (a served model often sees batches of one)."""
    error = 0.0
    with torch.no_grad():
        for batch in (list(inputs.values()), [tensor[:1] for tensor in inputs.values()]):
            expected, actual = module(*batch), runner(*batch)
            if actual.shape != expected.shape:
                raise ExportError(
                    f"the exported model returns shape {list(actual.shape)} where the module returns "
                    f"{list(expected.shape)}; nothing written"
                )
            error = max(error, float((actual.float() - expected.float()).abs().max()))
    return error


def export(
    module: nn.Module,
    inputs: Tensor | Inputs,
    format: str,
    output: Path,
    metadata: dict[str, Any],
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """Export `module` (on the CPU, in eval mode) to `output`, checked on `inputs` (a tensor, or
    tensors by name in `forward`'s order); returns the metadata written beside it, with `metadata` added."""
    check_format(format)
    if format in NEEDS:
        require(NEEDS[format], f"--format={format}", "export")
    module = module.cpu().eval()
    named = {"input": inputs} if isinstance(inputs, Tensor) else inputs
    inputs = {name: twice_if_one(tensor.cpu()) for name, tensor in named.items()}
    with partial_file(output, suffix=FORMATS[format]) as partial:  # renamed into place once checked
        with quiet_exporters():
            WRITERS[format](module, inputs, partial)
        error = parity_error(module, load(partial, format), inputs)
        samples = len(next(iter(inputs.values())))
        if not error <= tolerance:
            raise ExportError(
                f"the {format} export differs from the model by up to {error:.3g} on {samples} "
                f"validation inputs, above the tolerance {tolerance:g}; nothing written. Try another "
                "--format, or --tolerance=VALUE if that difference is acceptable"
            )
        with torch.no_grad():
            answer = module(*(tensor[:1] for tensor in inputs.values()))
        described_inputs = [tensor_description(name, tensor) for name, tensor in inputs.items()]
        # One input: under `input` too, where serving reads it.
        one_input = {"input": described_inputs[0]} if len(inputs) == 1 else {}
        described = {
            "format": format,
            "file": output.name,
            "inputs": described_inputs,
            **one_input,
            "output": tensor_description("output", answer),
            **metadata,
            "parity": {"max_abs_error": error, "tolerance": tolerance, "inputs": samples},
            "versions": {"torch": torch.__version__},
        }
    write_json(metadata_path(output), described)
    return described


def twice_if_one(tensor: Tensor) -> Tensor:
    """A batch of at least two: a batch of one would fix the exported batch dimension at 1."""
    return tensor if len(tensor) > 1 else tensor.repeat(2, *[1] * (tensor.dim() - 1))


def tensor_description(name: str, tensor: Tensor) -> dict[str, Any]:
    """A name, a shape with a free batch dimension (`None`) and a dtype, for the metadata."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    return {"name": name, "shape": [None, *tensor.shape[1:]], "dtype": dtype}


def write_json(path: Path, content: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(content, indent=2) + "\n")


def read_metadata(exported: Path) -> dict[str, Any]:
    """The `<file>.json` written beside an exported model."""
    path = metadata_path(exported)
    if not path.is_file():
        raise ExportError(f"{path} is missing: serve a file written by `main.py export`, with its .json")
    return dict(json.loads(path.read_text()))
