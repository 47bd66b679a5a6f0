"""Files written whole or not at all, and settings flattened to dotted names.

A kill or a full disk mid-write must leave the previous file (a config, trackers.json,
predictions, an export's metadata) intact, never half of a new one.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_atomically(path: Path, content: str | bytes) -> None:
    """Write `content` to a hidden partial file beside `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        if isinstance(content, bytes):
            partial.write_bytes(content)
        else:
            partial.write_text(content)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


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
