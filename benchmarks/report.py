"""Print the figures as small aligned tables and keep them as JSON, for comparing later changes."""

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from .project import TEMPLATE_DIR


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def machine() -> dict:
    """What the figures depend on besides the code: versions, cores, load, the template's commit."""

    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(TEMPLATE_DIR), *args], capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "python": platform.python_version(),
        "packages": {
            name: version(name) for name in ("torch", "lightning", "torchmetrics", "jsonargparse", "rich")
        },
        "cpus": os.cpu_count(),
        "loadavg_1min": os.getloadavg()[0],
        "template_commit": git("rev-parse", "--short", "HEAD"),
        "template_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "argv": sys.argv[1:],
    }


def save(figures: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    return path
