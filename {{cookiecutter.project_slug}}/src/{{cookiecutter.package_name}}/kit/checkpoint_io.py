"""Checkpoint files written whole or not at all, through Lightning's `CheckpointIO` plugin point."""

from pathlib import Path
from typing import Any

from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO

from .files import partial_file


class AtomicCheckpointIO(CheckpointIO):
    """Writes each checkpoint to a hidden partial file beside it, then renames it into place.

    A kill or a full disk mid-write leaves the previous file whole and no partial `*.ckpt` that
    `--ckpt_path=best|last` could pick. The bytes are written by `writer` (the strategy's own,
    `torch.save` by default), so any writer becomes atomic the same way. The kit's CLI wraps
    every Trainer's writer in it; with a Trainer of your own, pass `plugins=[AtomicCheckpointIO()]`.
    """

    def __init__(self, writer: CheckpointIO | None = None) -> None:
        self.writer = writer or TorchCheckpointIO()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        with partial_file(Path(path)) as partial:
            self.writer.save_checkpoint(checkpoint, partial, storage_options)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> Any:
        # The writer's own default map_location unless one is asked for (torch's keeps tensors on the CPU).
        where = {} if map_location is None else {"map_location": map_location}
        return self.writer.load_checkpoint(path, weights_only=weights_only, **where)

    def remove_checkpoint(self, path: Any) -> None:
        self.writer.remove_checkpoint(path)

    def teardown(self) -> None:
        self.writer.teardown()
