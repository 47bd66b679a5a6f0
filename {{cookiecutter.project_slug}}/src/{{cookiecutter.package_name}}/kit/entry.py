"""What `python main.py ...` does around your CLI, in the order it must.

1. SLURM's warning is noted from the first moment (early_signal.py), before torch loads;
2. `doctor` runs before anything imports torch: it checks torch itself;
3. `sweep` runs an Optuna study whose trials are `fit` runs of the same main.py;
4. anything else is your CLI (`cli_main` in your cli.py), run so that a DDP rank exits with its
   run's own code, never by the abort a gloo group can cause (process_exit.py).
Only the standard library is imported at module level, so that step 2 holds.
"""

import importlib
import sys


def main(cli_module: str) -> None:
    """Run main.py's command line; `cli_module` names your module with `cli_main`, imported last."""
    from . import early_signal

    early_signal.catch()
    command, argv = sys.argv[1:2], sys.argv[2:]
    if command == ["doctor"]:
        from .doctor import main as doctor

        raise SystemExit(doctor(argv))
    if command == ["sweep"]:
        from .sweep import main as sweep

        script = sys.modules["__main__"].__file__  # main.py, as Python ran it
        raise SystemExit(sweep([sys.executable, str(script), "fit"], argv))
    from .process_exit import run_and_exit

    # `cli_main` reads configs/default.yaml, then your -c files and flags.
    run_and_exit(importlib.import_module(cli_module).cli_main)
