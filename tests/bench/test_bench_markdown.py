"""BENCHMARKS.md writer and the suite runner's handling of missing or failing benchmarks."""

import json
import os
import time

import pytest

from bench.__main__ import main, run_module
from bench.common import BenchResult, Row, median_time, median_times, ratio_row
from bench.markdown import render, write

MACHINE = {"command": "python -m bench --quick", "date": "today", "cpu_model": "test cpu", "cores": 2}


def test_ratio_row_judges_goal_both_directions():
    faster = ratio_row("latency", 1.0, 2.0, "anchor", 1.0, "anchor/ours >= 1", higher_is_better=False)
    slower = ratio_row("GFLOP/s", 1.0, 2.0, "anchor", 0.9, "ours/anchor >= 0.9")
    missing = ratio_row("GFLOP/s", None, 2.0, "anchor", 0.9, "ours/anchor >= 0.9")
    assert (faster.ratio, faster.met) == (2.0, True)
    assert (slower.ratio, slower.met) == (0.5, False)
    assert (missing.ratio, missing.met) == (None, None)


def test_render_states_unmet_goals_and_not_run_benchmarks(tmp_path):
    ok = BenchResult("kernels", "Kernels", rows=[Row("gemm GFLOP/s", 10.0, 20.0, "numpy", 0.5, "ours/numpy >= 0.9",
                                                     False)], notes=["a note"], command="python -m bench.kernels")
    missing = BenchResult.not_run("service", "Service", "`bench.service` does not exist yet.")
    path = write([ok, missing], MACHINE, str(tmp_path))
    text = open(path).read()
    assert "| gemm GFLOP/s | 10 | numpy | 20 | 0.5 | ours/numpy >= 0.9 | **no** |" in text
    assert "**Not run.** `bench.service` does not exist yet." in text
    assert "| [Service](#service) | - | **not run**" in text
    assert os.path.getsize(tmp_path / "bench" / "plots" / "kernels.png") > 0
    assert "bench/plots/kernels.png" in text
    assert not (tmp_path / "bench" / "plots" / "service.png").exists()


def test_the_summary_gives_each_benchmark_its_mode(tmp_path):
    full = BenchResult("database", "Database", mode="full", command="python -m bench.database --json")
    quick = BenchResult("kernels", "Kernels", mode="quick", command="python -m bench.kernels --quick --json")
    text = render([quick, full], MACHINE, {})
    assert "| benchmark | mode | status | goals met | goals not met |" in text
    assert "| [Kernels](#kernels) | quick | ok | 0 | 0 |" in text
    assert "| [Database](#database) | full | ok | 0 | 0 |" in text


def test_full_needs_quick(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--full", "database"])
    assert exit_info.value.code == 2
    assert "--full names benchmarks to run at full size within a --quick run" in capsys.readouterr().err


def test_render_round_trips_json():
    res = BenchResult("x", "X", rows=[Row("a", 1.0, 2.0, "b", 0.5, "g", None)], plot={"kind": "ratios"})
    again = BenchResult.from_json(json.loads(json.dumps(res.to_json())))
    assert again == res
    assert "| a | 1 | b | 2 | 0.5 | g | - |" in render([again], MACHINE, {})


def test_run_module_reports_missing_and_failing_modules(tmp_path, monkeypatch):
    missing = run_module("nope", "bench.no_such_benchmark", "Nope", True, 30, dict(os.environ))
    assert missing.status == "not run" and "does not exist" in missing.reason
    failing = tmp_path / "failing_bench.py"
    failing.write_text("import sys\nprint('partial output')\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr("bench.__main__._module_path", lambda module: str(failing))
    failed = run_module("failing", "failing_bench", "Failing", True, 30, env)
    assert failed.status == "not run" and "exit status 3" in failed.reason


def test_median_time_counts_calls_per_argument_set():
    calls = []
    seconds = median_time(lambda i: calls.append(i), variants=3, repeat=3, min_repeat_s=0.001)
    assert seconds > 0
    assert set(calls) == {0, 1, 2}


def test_median_times_interleave_the_contenders():
    order = []
    medians = median_times({"a": lambda i: order.append("a"), "b": lambda i: order.append("b")},
                           variants=2, repeat=4, min_repeat_s=0.0, settle_s=0.0)
    assert set(medians) == {"a", "b"} and all(t > 0 for t in medians.values())
    timed = order[6:]  # after each contender's warm-up sweep and single timing call (3 calls each)
    runs = [timed[i] for i in range(len(timed)) if i == 0 or timed[i] != timed[i - 1]]
    assert len(runs) > 2, "the contenders take turns rather than one finishing all its repeats first"


def test_median_times_idle_before_each_repeat():
    stamps = []
    median_times({"a": lambda i: stamps.append(("a", time.perf_counter())),
                  "b": lambda i: stamps.append(("b", time.perf_counter()))},
                 variants=1, repeat=2, min_repeat_s=0.0, settle_s=0.05)
    timed = stamps[4:]  # after each contender's warm-up call and single timing call
    gaps = [later - earlier for (_, earlier), (_, later) in zip(timed, timed[1:])]
    assert len(timed) == 4 and min(gaps) >= 0.05, "every timed repeat follows an idle spell of settle_s"


def test_args_run_a_benchmark_scaled_with_its_arguments(tmp_path, monkeypatch):
    script = tmp_path / "echo_bench.py"
    script.write_text(
        "import json, sys\n"
        "from bench.common import BenchResult\n"
        "def parse_args(argv):\n"
        "    return argv\n"
        "if __name__ == '__main__':\n"
        "    res = BenchResult('echo', '', notes=['argv: ' + ' '.join(sys.argv[1:])],\n"
        "                      command='python -m echo_bench ' + ' '.join(sys.argv[1:]))\n"
        "    print(json.dumps(res.to_json()))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(tmp_path))  # python -m bench checks --args with the module's parse_args
    monkeypatch.setattr("bench.__main__.BENCHMARKS", [("echo", "echo_bench", "Echo"), ("quiet", "echo_bench", "Quiet")])
    monkeypatch.setattr("bench.__main__._module_path", lambda module: str(script))
    assert main(["--quick", "--args", "echo=--trials 4 --stages 'prefill decode'", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| [Echo](#echo) | scaled | ok | 0 | 0 |" in text
    assert "| [Quiet](#quiet) | quick | ok | 0 | 0 |" in text
    assert "argv: --trials 4 --stages prefill decode --json" in text
    assert "argv: --quick --json" in text


@pytest.mark.parametrize("spec, message", [
    ("layer", "expected NAME=ARGS"),
    ("nope=--trials 4", "expected NAME=ARGS"),
    ("cost_model=--trials 4", "the cost model has no script of its own"),
    ("layer=--quick", "--quick and --json are set by python -m bench"),
    ("layer=--stages 'decode", "No closing quotation"),
])
def test_bad_args_are_one_line_errors(spec, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--args", spec])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--timeout", "-5", "--only", "database"], "--timeout must be a positive number of seconds, got -5"),
    (["--timeout", "0", "--only", "database"], "--timeout must be a positive number of seconds, got 0"),
    (["--only", "database", "--args", "layer=--trials 4"], "--args layer: that benchmark is not chosen by --only"),
    (["--quick", "--args", "layer=--nosuch"], "--args layer: unrecognized arguments: --nosuch"),
    (["--quick", "--args", "later_compile=--stages train"], "--args later_compile: argument --stages: invalid choice"),
    (["--quick", "--args", "service=--n ten"], "--args service: argument --n: invalid int value: 'ten'"),
    (["--quick", "--args", "kernels=--trials -5"], "--args kernels: argument --trials: must be at least 1, got -5"),
    (["--quick", "--args", "kernels=--qui"], "--args kernels: unrecognized arguments: --qui"),  # no abbreviations
    (["--quick", "--args", "layer=--help"], "--args layer: it asks for help"),
])
def test_bad_options_are_refused_before_anything_runs(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "BENCHMARKS.md").exists()
