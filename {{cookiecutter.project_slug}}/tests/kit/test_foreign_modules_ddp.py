"""The foreign modules of `test_foreign_modules.py` under 2-process DDP on the CPU (gloo): the
same code path as several GPUs. A file of its own, so that pytest-xdist runs it beside the rest."""

import pytest

from foreign_modules import FOREIGN, default_config_for_any_module
from kit_testing import extra, last_checkpoint, run_fixtures

# Lightning's rule for a module that steps some parameters without the others (a GAN's two
# optimizers): DDP must look for unused parameters, or the first backward fails.
STRATEGY = {"gan": "ddp_find_unused_parameters_true"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_two_process_ddp_on_the_cpu_trains(name, tmp_path):
    if name == "text":
        extra("transformers", "hf")
    result = run_fixtures(
        tmp_path,
        f"--fixture={name}",
        "fit",
        "--trainer.max_epochs=1",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        f"--trainer.strategy={STRATEGY.get(name, 'ddp')}",
        env={"KIT_FIXTURES_DEFAULTS": str(default_config_for_any_module(tmp_path))},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Starting with 2 processes" in result.stdout + result.stderr
    # Each rank half the samples: 120 // 16 = 7 batches (the last, partial one dropped).
    assert last_checkpoint(tmp_path)["global_step"] == 7 * (2 if name == "gan" else 1)
