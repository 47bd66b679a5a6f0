"""Lightning's Trainer with two more entry points, `export` (any model) and `serve` (a classifier).

LightningCLI turns each Trainer method it is told about into a subcommand, with the method's
arguments as flags (`kit.cli.KitCLI.subcommands`): `python main.py export --ckpt_path=best
--format=onnx` and `python main.py serve --ckpt_path=best` build the model and the data from the
same configs as `fit`, and `--ckpt_path=best|last|PATH` restores the network the run trained.
Everything else about the Trainer is Lightning's, unchanged.
"""

import inspect
import math
import socket
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import Tensor

from .datamodule import KitDataModule
from .export import (
    FORMATS,
    TOLERANCE,
    ExportError,
    Inputs,
    check_format,
    default_output,
    export,
    model_inputs,
    read_metadata,
    require,
)


class KitTrainer(L.Trainer):
    """`lightning.Trainer`, plus `export` and `serve` (the CLI's subcommands of the same names)."""

    def export(
        self,
        model: L.LightningModule,
        datamodule: L.LightningDataModule | None = None,
        ckpt_path: str | Path | None = None,
        format: str = "onnx",
        output: Path | None = None,
        tolerance: float = TOLERANCE,
    ) -> Path:
        """Export a checkpoint's network (onnx, exported_program or torchscript), checked against it.

        Args:
            ckpt_path: The checkpoint: best, last (the newest run's) or a file.
            format: onnx (needs the `export` extra), exported_program (torch.export, .pt2) or
                torchscript (deprecated by PyTorch).
            output: The file to write; by default `export/<checkpoint name>.<suffix>` in the
                checkpoint's run folder. Its metadata goes to `<output>.json`.
            tolerance: Largest absolute difference allowed between the export's outputs and
                the model's on a batch of validation inputs (or on the module's
                `example_input_array`, where the validation batch does not fit it); above it
                nothing is written.
        """
        check_format(format)
        checkpoint = self._restore(model, ckpt_path, "export")
        inputs = example_inputs(self, datamodule, model)
        output = output or default_output(checkpoint, format)
        metadata = {"checkpoint": str(checkpoint.resolve()), **data_description(datamodule, model)}
        described = export(model, inputs, format, output, metadata, tolerance)
        parity = described["parity"]
        print(
            f"Exported {output} ({output.stat().st_size / 1e3:.1f} kB); largest difference from the model "
            f"on {parity['inputs']} validation inputs: {parity['max_abs_error']:.2g} (tolerance "
            f"{tolerance:g}). Metadata: {output.name}.json"
        )
        return output

    def serve(
        self,
        model: L.LightningModule,
        datamodule: L.LightningDataModule | None = None,
        ckpt_path: str | Path | None = None,
        exported: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_batch_size: int = 16,
        batch_timeout: float = 0.005,
        max_request_bytes: int = 10_000_000,
    ) -> None:
        """Serve a checkpoint or an exported model over HTTP: POST {"input": [...]} to /predict.

        A classifier answers a class and its confidence, any other model its output values; a
        LightningModule that defines `serve_answers(outputs)` answers what that returns
        (`kit/serving.py`).

        Args:
            ckpt_path: The checkpoint to serve: best, last (the newest run's) or a file.
            exported: Or a file written by `export` (with its .json beside it), run on the CPU.
            host: The address to listen on; 127.0.0.1 answers this machine only.
            port: The TCP port.
            max_batch_size: Requests run together at most.
            batch_timeout: Seconds to wait for more requests to fill a batch.
            max_request_bytes: Larger request bodies are answered with 413, unread: decoding
                them would hold up every other client.
        """
        check_serving(host, port, max_batch_size, batch_timeout, max_request_bytes)
        require(("litserve",), "serve", "serve")
        from .serving import InputSpec, answers_for, serve  # imports LitServe

        limits = (max_batch_size, batch_timeout, max_request_bytes)
        if exported is not None:
            metadata = read_metadata(exported)
            if "inputs" not in metadata:
                raise ExportError(f"{exported} was exported by an older version: export it again")
            inputs = [InputSpec.described(entry) for entry in metadata["inputs"]]
            answers = answers_for(None, metadata.get("num_classes"), metadata.get("class_names"))
            serve(inputs, answers, None, exported, host, port, "cpu", *limits)
            return
        self._restore(model, ckpt_path, "serve")
        inputs = [
            InputSpec.of(name, batch) for name, batch in example_inputs(self, datamodule, model).items()
        ]
        declared = data_description(datamodule, model)
        answers = answers_for(model, declared.get("num_classes"), declared.get("class_names"))
        accelerator = "cuda" if self.strategy.root_device.type == "cuda" else "cpu"
        serve(inputs, answers, model, None, host, port, accelerator, *limits)

    def _restore(self, model: L.LightningModule, ckpt_path: str | Path | None, command: str) -> Path:
        """Load the checkpoint's weights into `model`, through Lightning's own hooks."""
        if ckpt_path is None:
            raise ExportError(
                f"`{command}` needs trained weights: pass --ckpt_path=best, --ckpt_path=last or a file"
            )
        checkpoint = self.strategy.load_checkpoint(ckpt_path)
        model.on_load_checkpoint(checkpoint)
        model.load_state_dict(checkpoint["state_dict"])
        return Path(ckpt_path)


def check_serving(
    host: str, port: int, max_batch_size: int, batch_timeout: float, max_request_bytes: int
) -> None:
    """Refuse `serve` settings that cannot work, a port in use included, before anything starts."""
    if max_batch_size < 1 or batch_timeout < 0 or not math.isfinite(batch_timeout):
        raise ExportError("--max_batch_size must be 1 or more and --batch_timeout 0 or more (seconds)")
    if max_request_bytes < 1:
        raise ExportError(f"--max_request_bytes must be 1 or more, got {max_request_bytes}")
    if host not in ("127.0.0.1", "0.0.0.0", "::"):
        raise ExportError(f"--host={host}: serve listens on 127.0.0.1 (this machine), 0.0.0.0 or ::")
    if not 1024 <= port <= 65535:
        raise ExportError(f"--port={port}: use a port from 1024 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
        try:
            probe.bind((host, port))
        except OSError as error:
            problem = f"--port={port} is taken on {host} ({error.strerror})"
            raise ExportError(f"{problem}: pass another --port") from None


def example_inputs(
    trainer: L.Trainer, datamodule: L.LightningDataModule | None, model: L.LightningModule
) -> Inputs:
    """The inputs export checks against and serve describes: a validation batch's, where they fit
    what the module declares in `example_input_array` (Lightning's convention for forward's
    input), else the declared ones. Either way forward must run on them and return a tensor."""
    declared = declared_inputs(model)
    try:
        found = validation_inputs(trainer, datamodule, model)
    except ExportError:
        if declared is None:
            raise
        found = None
    if found is not None and (declared is None or same_layout(found, declared)):
        source = "the first validation batch's inputs (define example_input_array to choose them)"
        inputs = found
    else:
        source = f"{type(model).__name__}.example_input_array"
        inputs = declared  # type: ignore[assignment]
    check_forward(model, inputs, source)
    return inputs


def declared_inputs(model: L.LightningModule) -> Inputs | None:
    """`example_input_array` as named inputs in forward's order (a tensor is `input`; a tuple's
    tensors take forward's parameter names; a dict's keys are forward's), or None if undeclared."""
    example = model.example_input_array
    if example is None:
        return None
    parameters = list(inspect.signature(model.forward).parameters)
    if isinstance(example, Tensor):
        return {"input": example}
    if isinstance(example, list | tuple) and 0 < len(example) <= len(parameters):
        named = dict(zip(parameters, example, strict=False))  # forward's first arguments
        named = {"input": example[0]} if len(example) == 1 else named
    elif isinstance(example, dict) and set(example) <= set(parameters):
        named = {name: example[name] for name in parameters if name in example}
    else:
        named = {}
    if not named or not all(isinstance(value, Tensor) for value in named.values()):
        raise ExportError(
            f"{type(model).__name__}.example_input_array is not what export and serve can feed forward: "
            "make it a tensor, a tuple of tensors (forward's arguments in order) or a dict of tensors by "
            "argument name"
        )
    return named


def same_layout(found: Inputs, declared: Inputs) -> bool:
    """Whether two sets of inputs have the same names, and shapes and dtypes but for the batch size."""
    return list(found) == list(declared) and all(
        found[name].shape[1:] == declared[name].shape[1:] and found[name].dtype == declared[name].dtype
        for name in found
    )


def check_forward(model: L.LightningModule, inputs: Inputs, source: str) -> None:
    """Refuse in one line a forward that fails on `inputs` or returns other than one tensor."""
    name = type(model).__name__
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(*inputs.values())
    except Exception as error:
        message = " ".join(str(error).split())
        raise ExportError(
            f"{name}.forward failed on {source}: {message}. Set example_input_array in {name}.__init__ "
            "to an input forward takes"
        ) from None
    finally:
        model.train(was_training)
    if not isinstance(output, Tensor):
        raise ExportError(
            f"{name}.forward returns a {type(output).__name__}, not a tensor: export and serve need a "
            "forward that returns one tensor (e.g. the logits)"
        )


def validation_inputs(
    trainer: L.Trainer, datamodule: L.LightningDataModule | None, model: L.LightningModule
) -> Inputs:
    """The model's inputs in the first validation batch: real data, in the shape it is trained on."""
    if datamodule is None:
        raise ExportError("export and serve read a validation batch from the DataModule, and there is none")
    datamodule.trainer = trainer
    datamodule.prepare_data()
    datamodule.setup("validate")
    try:
        loaders: Any = datamodule.val_dataloader()
    except MisconfigurationException:  # Lightning's default: no val_dataloader defined
        raise ExportError(f"{type(datamodule).__name__} has no val_dataloader to read inputs from") from None
    loader = loaders[0] if isinstance(loaders, list | tuple) else loaders
    batch = next(iter(loader), None)
    if batch is None:
        raise ExportError("the validation set is empty: export and serve need a batch of it")
    return model_inputs(batch, model)


def data_description(datamodule: L.LightningDataModule | None, model: L.LightningModule) -> dict[str, Any]:
    """What the data and the model declare about the inputs and the classes, for the export's
    metadata: a `KitDataModule`'s `class_names` and `preprocessing`, and `num_classes` (the
    number of class names, or the model's `num_classes` hyperparameter). Nothing is inferred
    from the output's shape: a regressor's last dimension counts no classes."""
    described: dict[str, Any] = {}
    if isinstance(datamodule, KitDataModule):
        described = {"class_names": datamodule.class_names, "preprocessing": datamodule.preprocessing}
    names = described.get("class_names")
    described["num_classes"] = len(names) if names else model.hparams.get("num_classes")
    return {key: value for key, value in described.items() if value is not None}


__all__ = ["FORMATS", "KitTrainer"]
