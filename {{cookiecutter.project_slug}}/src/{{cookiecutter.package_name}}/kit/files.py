"""Files written whole or not at all, folders checked before writing, settings flattened to dotted names.

A kill or a full disk mid-write must leave the previous file (a config, trackers.json,
predictions, an export's metadata) intact, never half of a new one.
"""

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def write_atomically(path: Path, content: str | bytes) -> None:
    """Write `content` to a hidden partial file beside `path`, then rename it into place."""
    with partial_file(path) as partial:
        if isinstance(content, bytes):
            partial.write_bytes(content)
        else:
            partial.write_text(content)


def copy_atomically(source: Path, path: Path) -> None:
    """Copy the file `source` to `path` as `write_atomically` writes: whole or not at all."""
    with partial_file(path) as partial:
        shutil.copyfile(source, partial)


@contextlib.contextmanager
def partial_file(path: Path, suffix: str = "") -> Iterator[Path]:
    """A hidden partial file beside `path` to write, renamed into place if the block succeeds and
    removed if it fails: the one atomic write of the kit (configs, checkpoints, exports, CSVs).

    The partial file is this writer's own (process and thread in its name): two writers of one
    path at once (two sweep workers writing best.yaml) each rename a whole file, the last one wins.
    It ends in `.partial` so that no `*.ckpt` glob picks it, then `suffix` for a writer that needs
    one (an exporter picks its format by it).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial{suffix}")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def blocking_file(folder: Path) -> Path | None:
    """The file (not a folder) that `folder` or one of its parents is, which makes it unwritable."""
    for path in (folder, *folder.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def flatten(settings: Mapping[str, Any], prefix: str = "", sequences: bool = True) -> dict[str, Any]:
    """`{"network": {"init_args": {"width": 16}}, "layers": [8]}` ->
    `{"network.init_args.width": 16, "layers.0": 8}`; empty dicts and lists stay values, and so
    do all lists and tuples with `sequences=False` (to compare them whole)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}.", sequences))
        elif sequences and isinstance(value, list | tuple) and value:
            items = {str(i): item for i, item in enumerate(value)}
            flat.update(flatten(items, f"{name}.", sequences))
        else:
            flat[name] = value
    return flat
