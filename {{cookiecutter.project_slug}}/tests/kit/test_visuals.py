"""The TensorBoard pictures: what they show, when they are drawn, and that they reach the event files.

Runs draw the kit's fixtures as images: the Gaussian blobs as 1x8x8 pictures of 3 classes.
"""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from {{ cookiecutter.package_name }}.kit.visuals import (
    CORRECT,
    INK,
    WRONG,
    ValidationImages,
    confusion_image,
    heat_map,
    sample_grid,
    scatter_image,
    text_mask,
    top_mistakes_markdown,
)

from kit_fixtures import IMAGES
from kit_testing import QUICK, run_fixtures, run_fixtures_here

# The callback, as a config file or `--trainer.callbacks+=` adds it; flags after it set it up.
PICTURES = "--trainer.callbacks+={{ cookiecutter.package_name }}.kit.visuals.ValidationImages"


def events(run_dir: Path) -> EventAccumulator:
    """Everything in a run folder's (single) TensorBoard event file, images and text included."""
    (path,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(path), size_guidance={"images": 0, "tensors": 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


def text(accumulator: EventAccumulator, tag: str) -> list[str]:
    return [event.tensor_proto.string_val[0].decode() for event in accumulator.Tensors(f"{tag}/text_summary")]


def test_confusion_image_names_its_axes_and_numbers_its_classes():
    counts = torch.tensor([[3, 1], [0, 4]])
    image = confusion_image(counts, size=40)
    heat = heat_map(counts, size=40)
    inked, shaded = (image == INK).all(dim=0), (image != 1).any(dim=0)
    top = int(torch.nonzero(shaded.any(dim=1) & ~inked.any(dim=1))[0])  # first row of shade, no ink
    left = int(torch.nonzero(shaded[top])[0])
    assert torch.equal(image[:, top : top + 40, left : left + 40], heat), "the matrix, bottom right"
    above, beside = image[:, :top, left:], image[:, top:, :left]
    numbers = text_mask("0").sum() + text_mask("1").sum()
    assert inked[:top, left:].sum() == text_mask("PREDICTED").sum() + numbers, "the columns' name and numbers"
    assert inked[top:, :left].sum() == text_mask("TRUE").sum() + numbers, "the rows' name and numbers"
    assert not inked[top:, left:].any() and above.min() == beside.min() == INK
    # Too many classes for their numbers to fit a cell: the axis names alone.
    many = confusion_image(torch.eye(100, dtype=torch.long), size=300)
    assert (many == INK).all(dim=0).sum() == text_mask("PREDICTED").sum() + text_mask("TRUE").sum()


def test_heat_map_shades_each_true_class_by_share():
    counts = torch.tensor([[3, 1], [0, 4]])
    image = heat_map(counts, size=40)
    assert image.shape == (3, 40, 40) and image.min() >= 0 and image.max() <= 1
    cell = {(row, col): image[:, row * 20 + 10, col * 20 + 10] for row in (0, 1) for col in (0, 1)}
    assert torch.equal(cell[1, 0], torch.ones(3)), "a confusion that never happened is white"
    assert cell[0, 0].sum() < cell[0, 1].sum() < 3, "the common answer is darker than the rare mistake"
    assert torch.allclose(cell[1, 1], torch.tensor([0.0, 0.3, 0.7])), "always: full dark blue"


def test_sample_grid_frames_right_green_and_wrong_red_in_rows_of_eight():
    inputs = torch.rand(10, 1, 8, 8)
    correct = torch.tensor([True] * 9 + [False])
    grid = sample_grid(inputs, correct)
    tile = 8 * 4 + 2 * 2  # 8x8 enlarged to 32x32, plus a 2-pixel frame on each side
    assert grid.shape == (3, 2 * tile, 8 * tile)
    assert torch.allclose(grid[:, 0, 0], torch.tensor(CORRECT)), "first sample: right, green frame"
    assert torch.allclose(grid[:, tile, tile + 1], torch.tensor(WRONG)), "tenth sample (row 2, col 2): red"
    assert torch.equal(grid[:, tile + 5, 5 * tile + 5], torch.ones(3)), "no sample there: white"
    inside = grid[:, 2 : tile - 2, 2 : tile - 2]
    assert inside.min() == 0 and inside.max() == 1, "each image spans the full brightness range"


def test_top_mistakes_lists_the_most_frequent_confusion_first_and_never_a_right_answer():
    counts = torch.tensor([[5, 0, 1], [0, 6, 0], [3, 0, 4]])
    lines = top_mistakes_markdown(counts).splitlines()
    assert lines[0].startswith("Correct: 15 of 19.")
    rows = [line for line in lines if re.fullmatch(r"\| \d \| \d \| \d+ \|", line)]
    assert rows == ["| 2 | 0 | 3 |", "| 0 | 2 | 1 |"]
    named = top_mistakes_markdown(counts, class_names=["cat", "dog", "fox"]).splitlines()
    assert "| 2 (fox) | 0 (cat) | 3 |" in named, "the DataModule's class names beside the numbers"


def fake_trainer(fn: TrainerFn, epoch: int = 0, sanity_checking: bool = False) -> SimpleNamespace:
    """Just what `draws_now` reads, for a fit of 7 epochs."""
    state = SimpleNamespace(fn=fn)
    return SimpleNamespace(state=state, current_epoch=epoch, max_epochs=7, sanity_checking=sanity_checking)


def test_a_perfect_regressor_puts_every_dot_on_the_diagonal():
    values = torch.linspace(-3, 5, 50)
    picture = scatter_image(values, values, size=100)
    dots = (picture[2] > picture[0] + 0.2).nonzero()  # blue: more blue than red
    assert len(dots) > 40
    rows, columns = dots.unbind(dim=1)
    assert ((rows + columns) - 99).abs().max() <= 1, "up and across agree: the anti-diagonal of rows"
    off = scatter_image(values, values + 4, size=100)  # each target 4 above its prediction
    off_dots = (off[2] > off[0] + 0.2).nonzero()
    assert ((off_dots[:, 0] + off_dots[:, 1]) - 99).abs().min() > 10, "off the diagonal"


def test_a_regression_fit_draws_predicted_against_target_and_nothing_else(tmp_path, monkeypatch, recwarn):
    monkeypatch.chdir(tmp_path)
    fit = ("--fixture=regression", "fit", "--checkpoint.monitor=val/mse", "--trainer.max_epochs=2", *QUICK)
    run_fixtures_here(monkeypatch, *fit, PICTURES, "--trainer.callbacks.every_n_epochs=1")
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_0")
    accumulator = events(run_dir)
    assert len(accumulator.Images("val/predicted_vs_target")) == 2, "after each epoch"
    assert "val/confusion_matrix" not in accumulator.Tags()["images"]
    (summary, _) = text(accumulator, "val/predicted_vs_target")
    assert summary.startswith("60 values") and "R²" in summary, summary
    assert not [str(w.message) for w in recwarn if "ValidationImages" in str(w.message)]


def test_draws_every_n_epochs_and_after_the_last_but_never_in_the_sanity_check():
    callback = ValidationImages(every_n_epochs=5)
    drawn = [epoch + 1 for epoch in range(7) if callback.draws_now(fake_trainer(TrainerFn.FITTING, epoch))]
    assert drawn == [5, 7]
    assert not callback.draws_now(fake_trainer(TrainerFn.FITTING, 4, sanity_checking=True))
    assert callback.draws_now(fake_trainer(TrainerFn.VALIDATING)), "`validate` always draws"
    assert not ValidationImages(every_n_epochs=0).draws_now(fake_trainer(TrainerFn.FITTING, 6)), "0 is off"


@pytest.mark.parametrize("setting", [{"every_n_epochs": -1}, {"num_samples": -2}])
def test_negative_settings_are_refused_with_the_value_named(setting):
    ((name, value),) = setting.items()
    with pytest.raises(ValueError, match=f"{name} must be .* got {value}"):
        ValidationImages(**setting)


def test_without_tensorboard_it_says_so_once_instead_of_failing_later():
    trainer = SimpleNamespace(loggers=[], fast_dev_run=False)
    with pytest.warns(UserWarning, match="no TensorBoardLogger"):
        ValidationImages().setup(trainer, None, "fit")


def test_a_short_fit_writes_pictures_graph_and_hparams(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fit = ("fit", IMAGES, "--trainer.max_epochs=3", "--trainer.limit_train_batches=4", *QUICK)
    run_fixtures_here(monkeypatch, *fit, PICTURES, "--trainer.callbacks.every_n_epochs=2")
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_0")
    accumulator = events(run_dir)

    for tag in ("val/confusion_matrix", "val/samples"):
        images = accumulator.Images(tag)
        # After epochs 2 and 3 (the last), filed under the global step each epoch ended on.
        assert [image.step for image in images] == [2 * 4, 3 * 4], tag
        assert all(image.encoded_image_string.startswith(b"\x89PNG") for image in images)
    first_grid = accumulator.Images("val/samples")[0]
    assert (first_grid.width, first_grid.height) == (8 * 36, 4 * 36), "32 samples, 8 per row"
    assert accumulator.Tags()["graph"], "the model graph is in the GRAPHS tab"
    hparams = accumulator.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in hparams and "_hparams_/experiment" not in hparams, (
        "a session, merged"
    )

    # The validation split holds 60 images; every one is counted in the confusion matrix.
    assert all(" of 60." in summary for summary in text(accumulator, "val/confusion_matrix"))
    assert all("col 8" in summary for summary in text(accumulator, "val/samples"))


@pytest.mark.slow
def test_under_ddp_rank_zero_draws_a_confusion_matrix_of_every_rank(tmp_path):
    """Two CPU processes: each validates half the data; the picture must count both halves."""
    ddp = ("--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp")
    fit = ("fit", IMAGES, "--data.samples=236", "--trainer.max_epochs=1", *ddp)
    result = run_fixtures(tmp_path, *fit, PICTURES, "--trainer.callbacks.every_n_epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "lightning_logs").glob("version_0")
    (summary,) = text(events(run_dir), "val/confusion_matrix")
    # 59 images split over 2 ranks (30 + 29): each counted once, none repeated to even the shares.
    assert " of 59." in summary, summary
