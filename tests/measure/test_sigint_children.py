"""A Ctrl-C (SIGINT to the whole process group) ends the build pool's processes at once and quietly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # starts a pool process that imports TVM

# A parent holding a Builder's pool, one task in flight that registered an atexit handler
# raising KeyboardInterrupt (as torch's handlers do when a second Ctrl-C arrives).
_PARENT = """
import signal, sys, time
import tvm
from measure.builder import Builder

def task():
    import atexit, sys, time
    def interrupted():
        raise KeyboardInterrupt
    atexit.register(interrupted)
    print("running", file=sys.stderr, flush=True)
    time.sleep(120)

signal.signal(signal.SIGINT, lambda *_: print("stopping", file=sys.stderr, flush=True))
builder = Builder(tvm.target.Target("llvm"), workers=1, warm_up=False)
pool = builder._ready_pool()
future = pool.submit(task)
while not pool._worker_map or any(w._proc is None for w in pool._worker_map.values()):
    time.sleep(0.05)
print(*(w._proc.pid for w in pool._worker_map.values()), flush=True)
time.sleep(300)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")  # a zombie has ended
    except FileNotFoundError:
        return True


def test_sigint_to_the_group_ends_build_processes_quietly():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)  # a group of its own: pytest is not signalled
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert children, parent.stderr.read()
        seen = []
        while "running" not in seen:
            line = parent.stderr.readline()
            assert line, "".join(seen)
            seen.append(line.strip())
        os.killpg(parent.pid, signal.SIGINT)
        deadline = time.monotonic() + 5.0
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in children)
        time.sleep(0.5)  # what an atexit handler would print
    finally:
        parent.kill()
        _, err = parent.communicate(timeout=30)
    err = "\n".join(seen) + "\n" + err
    assert "stopping" in err
    assert "Traceback" not in err and "Exception ignored" not in err, err
