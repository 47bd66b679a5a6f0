"""A DDP rank ends with the exit code its run chose, never by the abort a live gloo group causes at
the interpreter's exit (`kit/process_exit.py`). Each case is its own process: it exits."""

import subprocess
import sys
import textwrap

import pytest

from kit_testing import free_port

RANK = textwrap.dedent(
    """
    import sys
    import torch, torch.distributed as dist
    from {{ cookiecutter.package_name }}.kit.process_exit import run_and_exit

    rank, world_size, port, ending = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)

    def entry():
        total = torch.ones(1)
        for _ in range(5):
            dist.all_reduce(total)
        print(f"rank {rank} summed {int(total.item())}", flush=True)
        if ending == "143":
            raise SystemExit(143)
        if ending == "message":
            raise SystemExit("stopped: see why")
        if ending == "error":
            raise ValueError("a bug in the user's code")

    run_and_exit(entry)
    """
)


def start_rank(rank: int, world_size: int, port: int, ending: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", RANK, str(rank), str(world_size), str(port), ending]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("ending", "code", "says"),
    [
        ("return", 0, ""),
        ("143", 143, ""),
        ("message", 1, "stopped: see why"),
        ("error", 1, "ValueError: a bug in the user's code"),
    ],
)
def test_a_rank_exits_as_python_would_have(ending, code, says):
    """Its run's `SystemExit` code, or 0, or 1 after the message or the traceback: output first."""
    process = start_rank(0, 1, free_port(), ending)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, err
    assert out == "rank 0 summed 1\n"
    assert says in err
    if ending == "error":
        assert "Traceback (most recent call last):" in err.splitlines()[0]  # torch prefixes "[rank0]: "


def test_ranks_that_stop_together_exit_143_every_time():
    """Left to the interpreter, about one exit in four aborts (-6) under load: four pairs at once,
    three times, make a single abort all but certain without the fix. (The race involves the TCP
    rendezvous: groups that meet through a file did not abort in 48 exits, so this test uses ports.)"""
    for _ in range(3):
        pairs = []
        ports: set[int] = set()
        while len(ports) < 4:  # four different ports: two pairs on one would wait for each other
            ports.add(free_port())
        for port in ports:
            pairs += [start_rank(rank, 2, port, "143") for rank in (0, 1)]
        errors = [process.communicate(timeout=120)[1] for process in pairs]
        codes = [process.returncode for process in pairs]
        assert codes == [143] * 8, [error for code, error in zip(codes, errors, strict=True) if code != 143]
