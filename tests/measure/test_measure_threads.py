"""TVM's runtime threads: one per physical core of the process, unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from measure.threads import physical_cores, use_physical_cores

PROBE = "import measure, tvm; print(tvm.get_global_func('runtime.NumThreads')())"


def _threads_in_fresh_process(env: dict) -> int:
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1])


def _env_without_thread_settings() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}


def test_physical_cores_are_within_the_affinity_mask():
    assert 1 <= physical_cores() <= len(os.sched_getaffinity(0))


@pytest.mark.slow
def test_importing_measure_gives_tvm_every_physical_core():
    """Without the setting TVM's pool takes half the logical CPUs on x86 (it assumes SMT)."""
    assert _threads_in_fresh_process(_env_without_thread_settings()) == physical_cores()


@pytest.mark.slow
def test_a_users_setting_is_kept():
    env = dict(_env_without_thread_settings(), TVM_NUM_THREADS="1")
    assert _threads_in_fresh_process(env) == 1


@pytest.mark.parametrize("name", ["TVM_NUM_THREADS", "OMP_NUM_THREADS"])
def test_use_physical_cores_leaves_a_set_variable_alone(monkeypatch, name):
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(name, "3")
    assert use_physical_cores() == 3
    assert os.environ.get("TVM_NUM_THREADS") == ("3" if name == "TVM_NUM_THREADS" else None)
    monkeypatch.delenv(name)
    assert use_physical_cores() == physical_cores()
    assert os.environ["TVM_NUM_THREADS"] == str(physical_cores())
