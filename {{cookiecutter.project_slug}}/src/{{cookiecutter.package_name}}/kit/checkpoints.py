"""Find checkpoints across runs, so `--ckpt_path=last` and `--ckpt_path=best` work in a new process.

Each run writes to its own `<save_dir>/<name>/version_N/checkpoints/`; Lightning itself only
looks in the current run's folder, which in a new process is still empty.
"""

from pathlib import Path


class CheckpointNotFoundError(Exception):
    """No checkpoint matches what was asked for; the message says what to do instead."""


def find_checkpoint(runs_dir: Path, which: str) -> Path:
    """The newest run's `last.ckpt` (`which="last"`) or its best checkpoint (`which="best"`)."""
    runs = sorted(
        (run for run in runs_dir.glob("version_*") if any((run / "checkpoints").glob("*.ckpt"))),
        key=lambda run: max(ckpt.stat().st_mtime for ckpt in (run / "checkpoints").glob("*.ckpt")),
    )
    pattern = "last.ckpt" if which == "last" else "best-*.ckpt"
    for run in reversed(runs):
        matches = sorted((run / "checkpoints").glob(pattern))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            listing = ", ".join(str(m) for m in matches)
            raise CheckpointNotFoundError(
                f"--ckpt_path={which} is ambiguous: {run} holds several ({listing}). "
                "Pass one as --ckpt_path=PATH."
            )
    raise CheckpointNotFoundError(
        f"--ckpt_path={which}: no {pattern} in any run under {runs_dir}. "
        "Train first with `python main.py fit`, or pass a checkpoint file as --ckpt_path=PATH."
    )


def version_number(folder: Path) -> int | None:
    """N for a folder named `version_N`, else None."""
    prefix, _, number = folder.name.partition("_")
    return int(number) if prefix == "version" and number.isdigit() else None


def run_version(checkpoint: Path) -> int | None:
    """The N of the `version_N` run folder a checkpoint belongs to, if it sits in one."""
    return version_number(checkpoint.resolve().parent.parent)


def next_version(runs_dir: Path) -> int:
    """The N of the next `version_N` folder in `runs_dir`: one more than the highest there."""
    numbers = [version_number(run) for run in runs_dir.glob("version_*")]
    return max((number for number in numbers if number is not None), default=-1) + 1
