"""Measure the template's overhead against plain PyTorch (`python -m benchmarks --help`).

Renders the template with its default answers into a temp folder (or takes `--project`), runs
each measurement, prints small tables and writes every figure to benchmarks/results/<time>.json.
"""

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

from .project import check_project, render_project
from .report import machine, save, table

MEASUREMENTS = ("throughput", "costs", "ddp", "startup", "accuracy", "suite", "shipping", "loading")
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0].split(" (")[0]
    )
    parser.add_argument("--project", type=Path, help="a generated project (default: render the template)")
    parser.add_argument(
        "--only",
        default="throughput,startup,accuracy",
        help=f"comma-separated, among {', '.join(MEASUREMENTS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--suite", action="store_true", help="also time the project's whole `pytest -q` (long)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved training rounds (default: 3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each start-up command (default: 3)")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads in every run: 1 steadies figures on a busy machine (default: torch's)",
    )
    parser.add_argument(
        "--precision",
        help="--trainer.precision for throughput, costs and ddp, the plain loop alike (e.g. bf16-mixed, "
        "16-mixed on a GPU; default: the project's config)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_DIR, help="folder for the JSON (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    if args.suite and "suite" not in args.only:
        args.only.append("suite")
    unknown = sorted(set(args.only) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"unknown measurement {', '.join(unknown)}: choose among {', '.join(MEASUREMENTS)}")
    return args


def log(message: str) -> None:
    print(f"[benchmarks] {message}", file=sys.stderr, flush=True)


def measure(project: Path, args: argparse.Namespace) -> dict:
    figures: dict = {"machine": machine(), "project": str(project)}
    for name in args.only:
        module = importlib.import_module(f".{name}", __package__)
        if name in ("throughput", "costs"):
            import torch

            if args.threads:
                torch.set_num_threads(args.threads)
            figures["machine"]["torch_threads"] = torch.get_num_threads()
            figures["machine"]["precision"] = args.precision or "the project's config"
            figures[name] = module.measure(project, args.rounds, log, args.precision)
        elif name == "ddp":  # its runs are processes of their own: --threads reaches them by OMP_NUM_THREADS
            figures[name] = module.measure(project, args.rounds, log, args.precision)
        elif name == "startup":
            figures[name] = module.measure(project, args.repeats, log)
        else:
            figures[name] = module.measure(project, log)
    figures["machine"]["loadavg_1min_after"] = os.getloadavg()[0]
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for every process started from here
    with tempfile.TemporaryDirectory(prefix="bench-project-") as tmp:
        project = check_project(args.project) if args.project else render_project(Path(tmp))
        log(f"measuring {project}")
        figures = measure(project, args)
    for name in args.only:
        module = importlib.import_module(f".{name}", __package__)
        print(f"\n{table(module.HEADER, module.rows(figures[name]))}")
    print(f"\nFigures written to {save(figures, args.results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
