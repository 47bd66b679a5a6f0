"""Train, validate, test or predict: `python main.py fit --help` lists every setting.

`export` (ONNX, torch.export, TorchScript; parity checked) and `serve` (HTTP, LitServe) are
subcommands too: `python main.py export --help`.

Also `python main.py doctor` (this machine's torch and GPUs) and `python main.py sweep`
(hyperparameter search with Optuna, configs/sweep.yaml).
"""

if __name__ == "__main__":  # required: spawn-based DDP launchers re-import this file
    from {{ cookiecutter.package_name }}.kit.entry import main

    # Your cli.py, run after the kit's start-up steps (kit/entry.py says which, and why first).
    main("{{ cookiecutter.package_name }}.cli")
