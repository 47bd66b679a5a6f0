"""Train, validate, test or predict: `python main.py fit --help` lists every setting.

`export` (ONNX, torch.export, TorchScript; parity checked) and `serve` (HTTP, LitServe) are
subcommands too: `python main.py export --help`.

Also `python main.py doctor` (this machine's torch and GPUs) and `python main.py sweep`
(hyperparameter search with Optuna, configs/sweep.yaml).
"""

import sys

if __name__ == "__main__":  # required: spawn-based DDP launchers re-import this file
    from {{ cookiecutter.package_name }}.kit import early_signal

    early_signal.catch()  # SLURM's warning while starting up must not end the job (see there)
    if sys.argv[1:2] == ["doctor"]:  # checks torch itself, so it must run before anything imports it
        from {{ cookiecutter.package_name }}.kit.doctor import main as doctor

        raise SystemExit(doctor(sys.argv[2:]))
    if sys.argv[1:2] == ["sweep"]:  # an Optuna study whose trials are `fit` runs of this file
        from {{ cookiecutter.package_name }}.kit.sweep import main as sweep

        raise SystemExit(sweep([sys.executable, __file__, "fit"], sys.argv[2:]))
    from {{ cookiecutter.package_name }}.cli import cli_main
    from {{ cookiecutter.package_name }}.kit.process_exit import run_and_exit

    run_and_exit(cli_main)  # reads configs/default.yaml, then your -c files and flags; a DDP rank
    # then exits with its run's code, never by the abort a gloo group can cause (see there)
