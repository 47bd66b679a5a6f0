"""Checks before a run starts from a checkpoint: the file is whole, and the settings asked for
agree with the ones it was trained with (the run folder's lock is `kit.run_folder`'s).

Each failure is a `ResumeError` whose message is one line naming the file or setting and the fix.
"""

import json
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace

from .errors import KitError
from .files import flatten


class ResumeError(KitError):
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
    if "_class_path" in saved:  # LightningCLI's record of the class, in subclass mode
        saved = {**saved, "class_path": saved["_class_path"]}
    saved_flat, asked_flat = flatten(saved, sequences=False), flatten(asked, sequences=False)
    differ = []
    for key in sorted(saved_flat.keys() & asked_flat.keys()):
        leaf = key.rsplit(".", 1)[-1]
        if key.startswith("_") or leaf.startswith("_") or leaf in allowed:
            continue
        if comparable(saved_flat[key]) != comparable(asked_flat[key]):
            differ.append(f"{key}: {saved_flat[key]!r} in the checkpoint, {asked_flat[key]!r} now")
    return differ


def flat_settings(settings: Any) -> dict[str, Any]:
    """A model's or DataModule's settings flattened (`network.init_args.width`), `init_args.` of
    subclass mode dropped, as they compare with a checkpoint's hyperparameters."""
    values = flatten((settings or Namespace()).as_dict(), sequences=False)
    return {key.removeprefix("init_args."): value for key, value in values.items()}


def check_settings_agree(
    path: Path,
    subcommand: str,
    model: Mapping[str, Any],
    data: Mapping[str, Any] | None = None,
    may_change: Iterable[str] = (),
) -> None:
    """Refuse settings asked for that the checkpoint contradicts.

    Resuming (`fit`) continues one run: a changed network, split or batch size would not (a
    different batch size makes the resumed loader skip a different number of samples). The
    other subcommands rebuild the checkpoint's model, so a model flag they would ignore is
    refused too (`data` is not compared: evaluating on other data is their point).
    """
    saved_model, saved_data = saved_settings(path)
    differ = [f"model.{d}" for d in contradictions(saved_model, model, may_change)]
    if data is not None:
        differ += [f"data.{d}" for d in contradictions(saved_data, data, may_change)]
    if not differ:
        return
    if subcommand == "fit":
        fix = "Resume with the run's own settings (drop those flags), or start a new run without --ckpt_path."
    else:
        fix = f"`{subcommand}` uses the checkpoint's model: drop those flags, or train a run with them."
    raise ResumeError(f"--ckpt_path={path} was trained with other settings ({'; '.join(differ)}). {fix}")
