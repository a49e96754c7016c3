"""The load-average sampling, the busy-machine warning and the interleaved end-to-end timing."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import tuner.compile as compile_mod
from measure import MeasureConfig, TrackerAddress
from tuner.load import LoadSampler, available_cpus, busy_warning, load_line, load_report

#: a busy loop that ends by itself after this many seconds, should the test fail to kill it
_BURN_S = 60
_BURN = f"import time\nend = time.monotonic() + {_BURN_S}\nwhile time.monotonic() < end:\n    pass\n"


def _sample_for(seconds: float) -> LoadSampler:
    sampler = LoadSampler(interval_s=1.0)
    with sampler:
        time.sleep(seconds)
    return sampler


def test_warning_names_the_busy_phase():
    report = {"tuning_max": 1.2, "timing": 3.5, "cpus": 2}
    warning = busy_warning(report)
    assert warning is not None and "timing 3.5" in warning and "tuning" not in warning.split(":")[1]
    assert "ratios unreliable" in warning and "quiet machine" in warning
    assert "tuning max 1.20, timing 3.50, on 2 cores" in load_line(report)


def test_quiet_report_gives_no_warning():
    assert busy_warning({"tuning_max": 1.9, "timing": 0.4, "cpus": 2}) is None
    assert busy_warning({"tuning_max": None, "timing": None, "cpus": 2}) is None
    assert "tuning max -, timing -" in load_line({"tuning_max": None, "timing": None, "cpus": 2})


@pytest.mark.slow
def test_quiet_sampling_gives_no_warning():
    """Without added work the load average does not rise by the margin the busy test detects."""
    sampler = _sample_for(3)
    assert len(sampler.samples) >= 2
    report = load_report(None, sampler)
    assert report["cpus"] == available_cpus()
    assert busy_warning(report, threshold=sampler.samples[0] + 0.5) is None


@pytest.mark.slow
def test_cpu_burners_raise_the_load_and_the_warning():
    """Two busy loops per core for 25 s raise the 1-minute load average by about
    ``2 * cores * (1 - exp(-25 / 60))`` (0.68 a core): well over the 0.5 threshold above
    the load before they started, whatever else the machine runs."""
    baseline = LoadSampler()
    baseline.sample()
    burners = []
    try:
        burners = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(2 * available_cpus())]
        sampler = _sample_for(25)
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait(timeout=10)
    report = load_report(None, sampler)
    warning = busy_warning(report, threshold=baseline.samples[0] + 0.5)
    assert warning is not None and "timing" in warning, (baseline.samples, sampler.samples)


class _FakeSession:
    def __init__(self):
        self.removed = []

    def remove(self, name):
        self.removed.append(name)

    def cpu(self):
        return None

    def get_function(self, name):
        return lambda: None


class _Timer:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, func):
        self.log.append(self.name)
        return type("Result", (), {"results": (len(self.log) * 1e-3,)})()


def test_worker_programs_and_eager_are_interleaved(monkeypatch):
    """Each round times one repeat of each program still owed one, then the caller's eager calls."""
    log: list[str] = []
    session = _FakeSession()
    monkeypatch.setattr(compile_mod.tvm_rpc, "connect_tracker",
                        lambda host, port: type("T", (), {"request": lambda self, key, session_timeout: session})())
    repeats = {"a.so": 3, "b.so": 2}
    monkeypatch.setattr(compile_mod, "_load_program", lambda s, held, artifact, names, config, n, prefix:
                        compile_mod._Loaded(artifact, (np.zeros(1),), repeats[artifact],
                                            _Timer(artifact[0], log), None))
    runs = compile_mod.run_on_worker(["a.so", "b.so"], [], TrackerAddress("h", 1), "k", MeasureConfig(repeat=3),
                                     between=lambda r: log.append(f"eager{r}"))
    assert log == ["a", "b", "eager0", "a", "b", "eager1", "a", "eager2"]
    assert [len(r.times_s) for r in runs] == [3, 2]
    assert session.removed == ["a.so", "b.so"]
