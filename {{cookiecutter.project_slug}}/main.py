"""Train, validate, test or predict: `python main.py fit --help` lists every setting.

`export` (ONNX, torch.export, TorchScript; parity checked) and `serve` (HTTP, LitServe) are
subcommands too: `python main.py export --help`.

Also `python main.py doctor` (this machine's torch and GPUs) and `python main.py sweep`
(hyperparameter search with Optuna, configs/sweep.yaml).
"""

if __name__ == "__main__":  # required: spawn-based DDP launchers re-import this file
    from {{ cookiecutter.package_name }}.kit.entry import main

    main("{{ cookiecutter.package_name }}.cli")  # your cli.py, after the kit's start-up steps (kit/entry.py)
