"""The example's loader settings on resume (the kit's checks themselves: tests/kit/test_resume_checks.py).

A resumed `fit` may change how batches reach the device (`pin_memory`), not what the loader's saved
position depends on (`num_workers`).
"""

import pytest
import torch

SHORT = ("--trainer.limit_val_batches=2", "--trainer.enable_progress_bar=false", "--trainer.max_epochs=-1")


def test_pin_memory_may_change_on_resume_and_num_workers_may_not(run_main, capsys, tmp_path):
    run_main("fit", *SHORT, "--trainer.max_steps=3")
    with pytest.raises(SystemExit) as stop:
        run_main("fit", *SHORT, "--ckpt_path=last", "--data.num_workers=2")
    assert stop.value.code == 2
    assert "data.num_workers: 0 in the checkpoint, 2 now" in capsys.readouterr().err
    run_main("fit", *SHORT, "--ckpt_path=last", "--trainer.max_steps=4", "--data.pin_memory=false")
    last = tmp_path / "logs" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 4
