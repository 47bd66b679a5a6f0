"""A new user's first `fit`, its resume and `test` print no warning they cannot act on.

Lightning's advertising tips, torchdata's and Lightning's deprecations of torch APIs and the
note about the kit's own checkpoint callbacks are silenced at their source (kit/console.py);
any other warning fails this test unless it is on the allow-list below, with why it stays.
"""

import re

import pytest

from conftest import main_py_process

ALLOWED = (
    # Lightning, where SLURM is installed but the run was not started with srun: it tells a
    # SLURM user how to get one process per task. Actionable; absent where there is no srun.
    "The `srun` command is available on your system but is not used",
)
# Lightning's notes that no setting of the project changes (the kit passes what they ask for).
NOTES = ("`weights_only` was not set",)
# A warning as Python prints it (`file.py:12: Category: message`, or Lightning's own format
# without the category), or Lightning's tips.
WARNING = re.compile(r"^\S+\.py:\d+: |Warning: |💡")


def unexpected_warnings(output: str) -> list[str]:
    lines = re.split(r"[\r\n]", output)  # a progress bar redraws its line with \r
    warned = [line for line in lines if WARNING.search(line) and not any(a in line for a in ALLOWED)]
    return warned + [line for line in lines if any(note in line for note in NOTES)]


@pytest.mark.slow
def test_fit_and_test_print_only_warnings_a_user_can_act_on(tmp_path):
    def main_py(*args: str) -> str:
        result = main_py_process(tmp_path, *args)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout + result.stderr

    fit = main_py("fit", "--trainer.max_epochs=1")
    resumed = main_py("fit", "--ckpt_path=last", "--trainer.max_epochs=2")
    test = main_py("test", "--ckpt_path=best")
    assert "Restored all states" in resumed and "Test metric" in test  # each did its job
    assert unexpected_warnings(fit) == []
    assert unexpected_warnings(resumed) == []
    assert unexpected_warnings(test) == []


def test_the_filter_of_this_test_sees_warnings():
    """The check above can fail: Python's, Lightning's and the tips' formats are all caught."""
    assert unexpected_warnings("x/y.py:3: UserWarning: something\rEpoch 0: 10%") == [
        "x/y.py:3: UserWarning: something"
    ]
    assert unexpected_warnings("/a/b/call.py:284: Be aware that when using `ckpt_path`") != []
    assert unexpected_warnings("💡 Tip: For seamless cloud logging") != []
    assert unexpected_warnings("`weights_only` was not set, defaulting to `False`.") != []
    assert (
        unexpected_warnings("/a/slurm.py:204: The `srun` command is available on your system but is not used")
        == []
    )
