"""Checks before a run starts from a checkpoint: the file is whole, the settings agree with it,
and no other process is resuming the same run folder.

Each failure is a `ResumeError` whose message is one line naming the file or setting and the fix.
"""

import json
import os
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import torch

_held_locks: list[IO[str]] = []  # open lock files, released when the process ends


class ResumeError(Exception):
    """A checkpoint that cannot be used as asked; the message says what to do instead."""


def is_local(path: str | Path) -> bool:
    return "://" not in str(path)


def check_whole(path: Path) -> None:
    """A missing, empty, truncated or foreign file gets one line, not torch's traceback.

    A checkpoint is a zip archive whose directory sits at its very end, so reading that
    directory is a cheap test that the file was written to the end.
    """
    if not path.is_file():
        raise ResumeError(f"--ckpt_path={path}: no such file. Pass an existing checkpoint, or best or last.")
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (zipfile.BadZipFile, OSError) as error:
        raise ResumeError(
            f"checkpoint {path} is damaged ({path.stat().st_size} bytes, {error}): it was cut short "
            "or is not a checkpoint. Use another: the run's best-*.ckpt (--ckpt_path=best) or a file."
        ) from None


def saved_settings(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and the DataModule's hyperparameters stored in a checkpoint (memory-mapped)."""
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    return checkpoint.get("hyper_parameters") or {}, checkpoint.get("datamodule_hyper_parameters") or {}


def flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"network": {"init_args": {"width": 16}}}` -> `{"network.init_args.width": 16}`."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def comparable(value: Any) -> str:
    """Tuples and lists, paths and strings compare equal when they say the same thing."""
    return json.dumps(value, sort_keys=True, default=str)


def contradictions(
    saved: Mapping[str, Any], asked: Mapping[str, Any], may_change: Iterable[str]
) -> list[str]:
    """`key: saved -> asked` for each setting both name with different values.

    Keys starting with `_` (LightningCLI's bookkeeping) and the leaf names in `may_change`
    (how data is loaded, not what it is) are not compared.
    """
    allowed = set(may_change)
    saved_flat, asked_flat = flatten(saved), flatten(asked)
    differ = []
    for key in sorted(saved_flat.keys() & asked_flat.keys()):
        leaf = key.rsplit(".", 1)[-1]
        if key.startswith("_") or leaf.startswith("_") or leaf in allowed:
            continue
        if comparable(saved_flat[key]) != comparable(asked_flat[key]):
            differ.append(f"{key}: {saved_flat[key]!r} in the checkpoint, {asked_flat[key]!r} now")
    return differ


def check_settings_agree(
    path: Path, model: Mapping[str, Any], data: Mapping[str, Any], may_change: Iterable[str]
) -> None:
    """Resuming continues one run: a changed network, split or batch size would not.

    A different batch size, for one, makes the resumed loader skip a different number of samples.
    """
    saved_model, saved_data = saved_settings(path)
    differ = [f"model.{d}" for d in contradictions(saved_model, model, may_change)]
    differ += [f"data.{d}" for d in contradictions(saved_data, data, may_change)]
    if differ:
        raise ResumeError(
            f"--ckpt_path={path} was trained with other settings ({'; '.join(differ)}). "
            "Resume with the run's own settings (drop those flags), or start a new run without --ckpt_path."
        )


def release_locks() -> None:
    """Let go of every run folder this process holds (the end of a run called from Python)."""
    while _held_locks:
        _held_locks.pop().close()


def lock_run_folder(run_dir: Path) -> None:
    """Hold an exclusive lock on `run_dir` until this process ends: one `fit` per run folder."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; nothing to hold
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = (run_dir / ".fit.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().strip() or "another process"
        lock.close()
        raise ResumeError(
            f"{run_dir} is in use by a running `fit` ({owner}). Wait for it to end, or stop it first."
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}")
    lock.flush()
    _held_locks.append(lock)
