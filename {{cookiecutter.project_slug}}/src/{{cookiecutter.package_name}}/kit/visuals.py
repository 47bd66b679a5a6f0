"""Pictures in TensorBoard: a confusion matrix and sample predictions for a classifier, predicted
against target values for a regressor, and the model graph.

Scalars say *how well* the model does; these pictures say *where it goes wrong*. They are drawn
with plain torch ops (no plotting library) and only every few epochs, so training stays fast.
"""

import math
import warnings
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torchmetrics.classification import MulticlassConfusionMatrix

CORRECT = (0.1, 0.7, 0.2)  # frame colour (RGB) of a correctly classified sample: green
WRONG = (0.9, 0.1, 0.1)  # and of a misclassified one: red


class ValidationImages(L.Callback):
    """Logs pictures of the validation set to TensorBoard's images tab, as the task calls for.

    Every `every_n_epochs` epochs (and after the last one) it runs the model once more on each
    validation batch (`(inputs, targets)` pairs), so the LightningModule needs no changes. The
    targets say the task: whole numbers, a classifier; floats, a regressor.
    - `val/confusion_matrix` (classifier): rows are true classes, columns predicted ones, each row
      scaled to sum to 1 (dark = most of that class). Counted over the whole validation set, all
      ranks. Its text entry lists the most frequent mistakes.
    - `val/samples` (classifier on images): the first `num_samples` validation inputs, framed green
      when predicted right and red when wrong; its text entry gives each predicted class (and
      true one if wrong).
    - `val/predicted_vs_target` (regressor): each value predicted (up) against its target
      (across), rank zero's share of the validation set, up to `MAX_POINTS`; on the diagonal is
      right. Its text entry gives the mean absolute error and R².
    - the model graph (GRAPHS tab), once at the start of fit, traced from the module's
      `example_input_array`, when `log_graph` is on.
    Pictures are drawn only where they provably fit: an `(inputs, targets)` tensor pair whose
    inputs have the shape the module's `example_input_array` declares (where it declares one),
    a `forward(inputs)` that runs, and an output shaped like the targets (values) or one score
    per class (classes). Any other model or batch (dicts, a GAN's noise, an autoencoder whose
    `training_step` reshapes) gets the graph only and one line saying why: a picture never ends
    a run. `every_n_epochs=0` turns the pictures off. `python main.py validate` draws them every time.
    """

    MAX_POINTS = 4096

    def __init__(self, every_n_epochs: int = 5, num_samples: int = 32, log_graph: bool = True) -> None:
        super().__init__()
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be 0 (off) or more, got {every_n_epochs}.")
        if num_samples < 0:
            raise ValueError(f"num_samples must be 0 (no sample grid) or more, got {num_samples}.")
        self.every_n_epochs = every_n_epochs
        self.num_samples = num_samples
        self.log_graph = log_graph
        self._confusion: MulticlassConfusionMatrix | None = None
        self._samples: list[tuple[Tensor, Tensor, Tensor]] = []  # (inputs, predicted, targets)
        self._values: list[tuple[Tensor, Tensor]] = []  # a regressor's (predicted, targets)
        self._drawing = False  # this validation run draws: decided alike on every rank
        self._unfit: str | None = None  # why this model or its batches get no pictures, once found
        self._graph_drawn = False  # once per run, even if a tuner fits a few trial steps first

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.every_n_epochs and _tensorboard(trainer) is None and not trainer.fast_dev_run:
            rank_zero_warn(
                "ValidationImages draws into TensorBoard, but no TensorBoardLogger is configured, so it "
                "draws nothing. Use --trainer.logger=TensorBoardLogger or drop it from trainer.callbacks."
            )

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger, example = _tensorboard(trainer), pl_module.example_input_array
        wanted = self.log_graph and not self._graph_drawn and trainer.is_global_zero
        if not (wanted and logger is not None and isinstance(example, Tensor)):
            return
        self._graph_drawn = True
        # A one-off trace of a single forward pass: cheap next to a training epoch.
        example = trainer.precision_plugin.convert_input(example.to(pl_module.device))
        try:
            with warnings.catch_warnings():
                # torch.jit (behind add_graph) and torchmetrics warn about their own deprecations.
                warnings.simplefilter("ignore", DeprecationWarning)
                logger.experiment.add_graph(pl_module, example)
        except Exception as error:  # the graph is a nicety: a model that cannot be traced still trains
            rank_zero_warn(f"ValidationImages could not draw the model graph: {error}. Set log_graph: false.")

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Decided alike on every rank: the confusion matrix syncs across all of them.
        self._drawing = self.draws_now(trainer) and _tensorboard(trainer) is not None
        self._samples, self._values = [], []
        if self._confusion is not None:
            self._confusion.reset()

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not self._drawing or self._unfit is not None:
            return
        inputs, targets = self._pair(batch, pl_module)
        if inputs is None or targets is None:
            return
        try:
            with trainer.precision_plugin.val_step_context():  # the same numerics as validation_step
                predictions = pl_module(inputs)
        except Exception as error:  # a model whose forward takes something else: no pictures
            self._give_up(
                f"{type(pl_module).__name__}.forward(batch[0]) failed: {' '.join(str(error).split())}"
            )
            return
        if not isinstance(predictions, Tensor) or len(predictions) != len(targets):
            self._give_up("forward(batch[0]) does not return one output per target")
        elif targets.is_floating_point():
            if predictions.numel() != targets.numel():
                self._give_up(
                    f"its outputs {list(predictions.shape)} do not match its targets {list(targets.shape)}"
                )
            else:
                self._collect_values(trainer, predictions, targets)
        elif predictions.dim() != 2 or targets.dim() != 1 or int(targets.max()) >= predictions.shape[-1]:
            self._give_up(f"its outputs {list(predictions.shape)} are not one score per class of its targets")
        else:
            self._collect_classes(trainer, inputs, predictions, targets)

    def _pair(self, batch: Any, pl_module: L.LightningModule) -> tuple[Tensor | None, Tensor | None]:
        """The batch's (inputs, targets), where the batch is such a pair and the inputs fit the
        module's `example_input_array`; else (None, None), after saying why once."""
        pair = isinstance(batch, list | tuple) and len(batch) == 2
        if not (pair and all(isinstance(part, Tensor) for part in batch)):
            self._give_up("its batches are not (inputs, targets) tensor pairs")
            return None, None
        inputs, targets = batch
        declared = pl_module.example_input_array
        if isinstance(declared, list | tuple) and len(declared) == 1:
            declared = declared[0]
        if declared is not None and not isinstance(declared, Tensor):
            self._give_up("its example_input_array declares several inputs")
            return None, None
        if declared is not None and declared.shape[1:] != inputs.shape[1:]:
            shapes = f"[N, {', '.join(map(str, inputs.shape[1:]))}]"
            self._give_up(f"batch[0] is {shapes}, not the input example_input_array declares")
            return None, None
        return inputs, targets

    def _give_up(self, reason: str) -> None:
        """Draw nothing more in this run, and say why in one line (rank zero)."""
        self._unfit = reason
        self._samples, self._values = [], []
        rank_zero_info(
            f"ValidationImages draws no pictures for this model: {reason}. Scalars and the graph are kept."
        )

    def _collect_values(self, trainer: L.Trainer, predictions: Tensor, targets: Tensor) -> None:
        missing = self.MAX_POINTS - sum(len(chunk[0]) for chunk in self._values)
        if trainer.is_global_zero and missing > 0 and predictions.numel() == targets.numel():
            chunk = (predictions.detach().float().flatten(), targets.detach().float().flatten())
            self._values.append(tuple(part[:missing].cpu() for part in chunk))  # type: ignore[arg-type]

    def _collect_classes(self, trainer: L.Trainer, inputs: Tensor, logits: Tensor, targets: Tensor) -> None:
        predicted = logits.argmax(dim=-1)
        self._confusion_matrix(logits.shape[-1], logits.device).update(predicted, targets)
        missing = self.num_samples - sum(len(chunk[0]) for chunk in self._samples)
        if trainer.is_global_zero and missing > 0 and inputs.dim() in (3, 4):  # images only
            chunk = (inputs[:missing], predicted[:missing], targets[:missing])
            self._samples.append(tuple(part.detach().float().cpu() for part in chunk))  # type: ignore[arg-type]

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._drawing:
            return
        logger = _tensorboard(trainer)
        if self._values and logger is not None and self._unfit is None:  # rank zero's share: no collective
            predicted, targets = (torch.cat(parts) for parts in zip(*self._values, strict=True))
            writer, step = logger.experiment, trainer.global_step
            writer.add_image(
                "val/predicted_vs_target", scatter_image(predicted, targets), step, dataformats="CHW"
            )
            writer.add_text("val/predicted_vs_target", fit_markdown(predicted, targets), step)
        # Every rank found the batches fit (a collective, as is the matrix's own sync), or none draws it.
        fits = self._confusion is not None and self._unfit is None
        if trainer.world_size > 1:
            fits = trainer.strategy.reduce_boolean_decision(fits, all=True)
        if not fits or self._confusion is None:
            return
        counts = self._confusion.compute()  # a collective under DDP: every rank must call it
        if not trainer.is_global_zero or logger is None:
            return
        writer, step = logger.experiment, trainer.global_step
        writer.add_image("val/confusion_matrix", confusion_image(counts), step, dataformats="CHW")
        class_names = getattr(trainer.datamodule, "class_names", None)
        writer.add_text("val/confusion_matrix", top_mistakes_markdown(counts, class_names=class_names), step)
        if self._samples:
            inputs, predicted, targets = (torch.cat(parts) for parts in zip(*self._samples, strict=True))
            grid = sample_grid(inputs, correct=predicted == targets)
            writer.add_image("val/samples", grid, step, dataformats="CHW")
            writer.add_text("val/samples", predictions_markdown(predicted, targets), step)

    def draws_now(self, trainer: L.Trainer) -> bool:
        """Whether this validation run gets pictures: never in the sanity check before training."""
        if not self.every_n_epochs or trainer.sanity_checking:
            return False
        if trainer.state.fn != TrainerFn.FITTING:
            return True
        epoch = trainer.current_epoch + 1
        return epoch % self.every_n_epochs == 0 or epoch == trainer.max_epochs

    def _confusion_matrix(self, num_classes: int, device: torch.device) -> MulticlassConfusionMatrix:
        """Built on first use, sized by the model's output: no class count to configure."""
        if self._confusion is None:
            self._confusion = MulticlassConfusionMatrix(num_classes).to(device)
        return self._confusion


def _tensorboard(trainer: L.Trainer) -> TensorBoardLogger | None:
    return next((logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)), None)


def confusion_image(counts: Tensor, size: int = 320) -> Tensor:
    """A (3, H, W) heat map in [0, 1] of a confusion matrix, each true-class row normalised, with
    its axes named ("TRUE" down the left, "PREDICTED" across the top) and each class's number.

    White means never, dark blue means always. Shades follow the square root of the share, so a
    rare mistake (1 in 20) still shows. Each cell is a square of pixels, `size` wide in all; the
    class numbers are left out where cells are too small to hold them (the text entry names them).
    """
    heat = heat_map(counts, size)
    side, classes = heat.shape[-1], len(counts)
    cell = side // classes
    labels = [text_mask(str(number)) for number in range(classes)] if cell >= 2 * GLYPH_SCALE * 4 else []
    across, down = text_mask("PREDICTED"), text_mask("TRUE").rot90(1)  # down the left, read upwards
    pad, glyph_height = 4, 5 * GLYPH_SCALE
    top = pad + across.shape[0] + pad + (glyph_height + pad if labels else 0)
    left = pad + down.shape[1] + pad + (max(label.shape[1] for label in labels) + pad if labels else 0)
    height, width = max(side, down.shape[0]), max(side, across.shape[1])  # a tiny matrix: room for names
    picture = torch.ones(3, top + height + pad, left + width + pad)
    picture[:, top : top + side, left : left + side] = heat
    draw(picture, across, pad, left + max(0, side - across.shape[1]) // 2)
    draw(picture, down, top + max(0, side - down.shape[0]) // 2, pad)
    for number, label in enumerate(labels):
        middle = number * cell + cell // 2
        draw(picture, label, top - pad - glyph_height, left + middle - label.shape[1] // 2)  # its column
        draw(picture, label, top + middle - glyph_height // 2, left - pad - label.shape[1])  # its row
    return picture


def heat_map(counts: Tensor, size: int) -> Tensor:
    """The matrix alone: (3, S, S), S the largest multiple of the class count up to `size`."""
    counts = counts.float().cpu()
    shares = (counts / counts.sum(dim=1, keepdim=True).clamp(min=1)).sqrt()
    cell = max(1, size // len(counts))
    shares = shares.repeat_interleave(cell, dim=0).repeat_interleave(cell, dim=1)
    white_to_blue = torch.tensor([1.0, 0.7, 0.3]).view(3, 1, 1)  # how much each channel darkens
    return 1 - white_to_blue * shares


# A 3x5 pixel font: the digits and the letters of the axis names, enlarged GLYPH_SCALE times.
GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", "T": "111010010010010", "R": "110101110101101",
    "U": "101101101101111", "E": "111100110100111", "P": "110101110100100", "D": "110101101101110",
    "I": "111010010010111", "C": "111100100100111",
}  # fmt: skip
GLYPH_SCALE = 2
INK = 0.25  # dark grey


def text_mask(text: str) -> Tensor:
    """(H, W) booleans: `text` in the font above, one blank column between characters."""
    columns: list[Tensor] = []
    for character in text:
        glyph = torch.tensor([bit == "1" for bit in GLYPHS[character]]).view(5, 3)
        columns += [glyph, torch.zeros(5, 1, dtype=torch.bool)]
    mask = torch.cat(columns[:-1], dim=1)
    return mask.repeat_interleave(GLYPH_SCALE, dim=0).repeat_interleave(GLYPH_SCALE, dim=1)


def draw(picture: Tensor, mask: Tensor, row: int, column: int) -> None:
    """Ink `mask` into `picture` (3, H, W) with its top left corner at (row, column)."""
    height, width = mask.shape
    region = picture[:, row : row + height, column : column + width]
    region[:, mask[: region.shape[1], : region.shape[2]]] = INK


def sample_grid(inputs: Tensor, correct: Tensor, columns: int = 8, min_side: int = 32) -> Tensor:
    """A (3, H, W) grid in [0, 1] of input images, each framed green (right) or red (wrong).

    Each image is stretched to its own full brightness range (inputs are often normalised) and
    enlarged by whole pixels to at least `min_side`, so 8x8 digits stay visible.
    """
    images = inputs.float().cpu()
    if images.dim() == 3:  # (N, H, W): no channel axis
        images = images.unsqueeze(1)
    if images.shape[1] != 3:  # grey, or more channels than a picture shows: the first, in grey
        images = images[:, :1].expand(-1, 3, -1, -1)
    low = images.amin(dim=(1, 2, 3), keepdim=True)
    high = images.amax(dim=(1, 2, 3), keepdim=True)
    images = (images - low) / (high - low).clamp(min=1e-8)
    scale = max(1, math.ceil(min_side / max(images.shape[-2:])))
    images = images.repeat_interleave(scale, dim=-2).repeat_interleave(scale, dim=-1)

    border = 2
    count, _, height, width = images.shape
    colours = torch.where(correct.cpu().view(-1, 1), torch.tensor(CORRECT), torch.tensor(WRONG))  # (N, 3)
    framed = colours.view(count, 3, 1, 1).expand(count, 3, height + 2 * border, width + 2 * border).clone()
    framed[:, :, border:-border, border:-border] = images

    columns = min(columns, count)
    rows = math.ceil(count / columns)
    tile_h, tile_w = framed.shape[-2:]
    grid = torch.ones(3, rows * tile_h, columns * tile_w)  # white where the last row runs short
    for index, tile in enumerate(framed):
        row, column = divmod(index, columns)
        grid[:, row * tile_h : (row + 1) * tile_h, column * tile_w : (column + 1) * tile_w] = tile
    return grid


def scatter_image(predicted: Tensor, targets: Tensor, size: int = 320) -> Tensor:
    """A (3, H, W) picture in [0, 1]: a dot for each value, its target across and its prediction
    up, on one scale, with the diagonal (a perfect prediction) in grey. Dots that pile up darken."""
    values = torch.cat([predicted, targets]).float()
    low, high = float(values.min()), float(values.max())
    span = max(high - low, 1e-8)
    margin = 8
    inside = size - 2 * margin

    def pixel(value: Tensor) -> Tensor:
        return (margin + (value.float() - low) / span * (inside - 1)).round().long().clamp(0, size - 1)

    picture = torch.ones(3, size, size)
    diagonal = torch.arange(margin, size - margin)
    picture[:, size - 1 - diagonal, diagonal] = 0.8  # row 0 is the top: up means a smaller row
    column, row = pixel(targets), size - 1 - pixel(predicted)
    hits = torch.zeros(size, size).index_put_((row, column), torch.ones(len(row)), accumulate=True)
    shade = (hits / hits.max().clamp(min=1)).sqrt()  # one dot shows; a pile is darkest
    dots = hits > 0
    blue = torch.tensor([0.1, 0.3, 0.8]).view(3, 1)
    picture[:, dots] = 1 - (1 - blue) * (0.5 + 0.5 * shade[dots])
    return picture


def fit_markdown(predicted: Tensor, targets: Tensor) -> str:
    """How close the predictions in the picture are: mean absolute error and R²."""
    errors = predicted.float() - targets.float()
    spread = ((targets - targets.mean()) ** 2).sum()
    r2 = 1 - float((errors**2).sum() / spread) if float(spread) > 0 else float("nan")
    mae = float(errors.abs().mean())
    return (
        f"{len(errors)} values (rank zero's validation share). Across: target; up: predicted; "
        f"the grey diagonal is a perfect prediction.\n\nMean absolute error {mae:.4g}; R² {r2:.3f}."
    )


def top_mistakes_markdown(counts: Tensor, top: int = 10, class_names: Sequence[str] | None = None) -> str:
    """The most frequent (true -> predicted) confusions as a markdown table, by class number (and
    name, where the DataModule gives `class_names`)."""
    counts = counts.cpu()
    names = list(class_names) if class_names is not None and len(class_names) == len(counts) else None

    def named(number: int) -> str:
        return f"{number} ({names[number]})" if names and names[number] != str(number) else str(number)

    total = int(counts.sum())
    mistakes = counts.clone()
    mistakes.fill_diagonal_(0)
    values, flat = mistakes.flatten().topk(min(top, mistakes.numel()))
    lines = [
        f"Correct: {int(counts.trace())} of {total}. Picture rows: true class (TRUE); "
        "columns: predicted class (PREDICTED), numbered from 0.",
        "",
        "| true | predicted | times |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| {named(index // len(counts))} | {named(index % len(counts))} | {value} |"
        for value, index in zip(values.tolist(), flat.tolist(), strict=True)
        if value > 0
    ]
    return "\n".join(lines)


def predictions_markdown(predicted: Tensor, targets: Tensor, columns: int = 8) -> str:
    """A markdown table laid out like the sample grid: the predicted class; for mistakes also the true one."""
    cells = [
        f"{p}" if p == t else f"**{p}** ({t})"
        for p, t in zip(predicted.long().tolist(), targets.long().tolist(), strict=True)
    ]
    columns = min(columns, len(cells))
    rows = [cells[start : start + columns] for start in range(0, len(cells), columns)]
    header = "| " + " | ".join(f"col {c + 1}" for c in range(columns)) + " |"
    lines = ["Predicted class per image, left to right; **wrong** ones show the true class in brackets.", ""]
    lines += [header, "|" + " --- |" * columns]
    lines += ["| " + " | ".join(row + [""] * (columns - len(row))) + " |" for row in rows]
    return "\n".join(lines)
