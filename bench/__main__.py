"""``python -m bench [--quick [--full NAME ...]] [--args NAME=ARGS ...] [--only NAME ...] [--out DIR]``: run every
benchmark, write BENCHMARKS.md.

Each benchmark runs in its own subprocess (``python -m bench.<module> [--quick]
--json``), so one that crashes, hangs past its time limit or is missing is
listed in BENCHMARKS.md as "not run" with the reason, and the others go on. A
benchmark module prints one JSON object on the last line of its stdout:
``bench.common.BenchResult.to_json()`` (name, title, rows of what / ours /
anchor / anchor_name / ratio / goal / met, notes, plot).

The cost-model benchmark runs here, on the database the sample-efficiency
benchmark leaves behind (``tune model eval --json``), against TenSet's published
XGBoost figures.

``--quick --full NAME ...`` runs the named benchmarks at their full sizes and the
others quick: the benchmarks whose full mode fits a session (extraction, service and
database: 1 to 6 minutes each on 2 cores; kernels: 15 minutes) publish their real
figures beside the smoke runs of those that take hours. The summary table gives
each benchmark's mode.

``--args NAME=ARGS`` runs that benchmark at full size with ``ARGS`` added to its
command line (for example ``--args layer='--trials 4 --stages prefill decode'``):
the real shapes at a budget that fits a session where the full budget takes hours.
Its mode in the summary is "scaled", and its section's command shows the arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

from .common import BenchResult, machine_info
from .cost_model import run as run_cost_model
from .markdown import write

#: (name, module, title), in the order of BENCHMARKS.md.
BENCHMARKS = [
    ("kernels", "bench.kernels",
     "Kernels: Qwen3-0.6B GEMMs and GEMVs against BLAS, PyTorch, its peers and the roofline"),
    ("sample_efficiency", "bench.sample_efficiency",
     "Sample efficiency: best latency versus trials against MetaSchedule tune_tir"),
    ("layer", "bench.layer",
     "End to end: the Qwen3-0.6B layer per stage against PyTorch eager, torch.compile, ONNX Runtime and MetaSchedule"),
    ("generate", "bench.generate",
     "Whole-model generation: Qwen3-0.6B decode and time to first token against transformers eager, llama.cpp "
     "(F32, Q8_0, Q4_0) and each format's roofline"),
    ("cost_model", None, "Cost model: held-out-workload ranking metrics against TenSet's published XGBoost"),
    ("later_compile", "bench.later_compile", "Later compile: Qwen3-1.7B on a warm database against MetaSchedule"),
    ("extraction", "bench.extraction",
     "E-graph extraction of a whole 28-layer Qwen3-0.6B, identical layers deduplicated"),
    ("service", "bench.service", "Service: measurements per minute with 1 and 2 workers, overhead"),
    ("database", "bench.database", "Database: query times at 1M measure records"),
]


def _load(values: tuple[float, ...]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def _module_path(module: str) -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *module.split(".")) + ".py"


def run_module(name: str, module: str, title: str, quick: bool, timeout_s: float, env: dict,
               extra: list[str] | None = None) -> BenchResult:
    """Run ``python -m module [--quick] [EXTRA ...] --json``; its result, or "not run" with the reason."""
    cmd = [sys.executable, "-m", module] + (["--quick"] if quick else []) + list(extra or []) + ["--json"]
    shown = " ".join(["python", "-m", module] + cmd[3:])
    if not os.path.exists(_module_path(module)):
        return BenchResult.not_run(name, title, f"`{module}` does not exist yet.", shown)
    start = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return BenchResult.not_run(name, title, f"stopped after its time limit of {timeout_s:.0f} s.", shown)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return BenchResult.not_run(name, title, f"exit status {proc.returncode}: " + " / ".join(tail), shown)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1])
        result = BenchResult.from_json({**data, "name": name, "title": data.get("title") or title})
    except (IndexError, ValueError, TypeError) as err:
        return BenchResult.not_run(name, title, f"its --json output is not a suite result ({err}); it printed: "
                                   + (lines[-1][:300] if lines else "nothing"), shown)
    result.command = result.command or shown
    result.seconds = result.seconds or time.time() - start
    return result


def _parse_extra_args(parser: argparse.ArgumentParser, specs: list[str]) -> dict[str, list[str]]:
    """``--args NAME=ARGS`` values as {name: argument list}; a parser error (exit 2) names a bad one."""
    modules = {name: module for name, module, _ in BENCHMARKS}
    extra = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or name not in modules:
            parser.error(f"--args {spec!r}: expected NAME=ARGS with NAME one of {', '.join(modules)}")
        if modules[name] is None:
            parser.error(f"--args {name}: the cost model has no script of its own; it follows sample_efficiency")
        try:
            extra[name] = extra.get(name, []) + shlex.split(text)
        except ValueError as err:
            parser.error(f"--args {name}: {err}")
        if "--quick" in extra[name] or "--json" in extra[name]:
            parser.error(f"--args {name}: --quick and --json are set by python -m bench")
    return extra


def _refused(module: str, argv: list[str]) -> str | None:
    """What the benchmark ``module``'s own parser says of ``argv`` (argparse's error message), or None if it takes it.

    Checked before any benchmark runs, so a typo in ``--args`` for a later one does not
    surface after the earlier ones have spent their time.
    """
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module(module).parse_args(argv + ["--json"])
    except SystemExit as exc:
        if not exc.code:
            return "it asks for help (or exits) instead of a benchmark run"
        lines = [line for line in errors.getvalue().splitlines() if line.strip()]
        return lines[-1].split(" error: ", 1)[-1] if lines else f"refused (exit {exc.code})"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks and write BENCHMARKS.md and its plots under ``--out``."""
    names = [b[0] for b in BENCHMARKS]
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few trials: a smoke run")
    parser.add_argument("--full", nargs="+", choices=names, metavar="NAME", default=[],
                        help="with --quick, run these benchmarks at their full sizes")
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME",
                        help=f"run only these benchmarks ({', '.join(names)})")
    parser.add_argument("--out", default=".", help="directory of BENCHMARKS.md and bench/plots/ (default: .)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds each benchmark may take (default: 240 quick, 14400 full)")
    parser.add_argument("--args", action="append", default=[], metavar="NAME=ARGS",
                        help="run benchmark NAME at full size with ARGS added to its command line (mode: scaled)")
    args = parser.parse_args(argv)
    if args.full and not args.quick:
        parser.error("--full names benchmarks to run at full size within a --quick run; without --quick all are")
    if args.timeout is not None and not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    extra = _parse_extra_args(parser, args.args)
    left_out = [name for name in extra if args.only and name not in args.only]
    if left_out:
        parser.error(f"--args {left_out[0]}: that benchmark is not chosen by --only")
    modules = {n: m for n, m, _ in BENCHMARKS}
    for name, argv_extra in extra.items():
        problem = _refused(modules[name], argv_extra)
        if problem:
            parser.error(f"--args {name}: {problem}")
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    machine = machine_info(command.strip())
    chosen = [b for b in BENCHMARKS if not args.only or b[0] in args.only]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-") as work:
        env = dict(os.environ, BENCH_WORK_DIR=work)
        for name, module, title in chosen:
            # the cost model evaluates the sample-efficiency benchmark's database: its mode is that one's
            sized_by = name if module else "sample_efficiency"
            quick = args.quick and sized_by not in args.full and sized_by not in extra
            timeout_s = args.timeout or (240.0 if quick else 14400.0)
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            load_before = os.getloadavg()
            if module is None:
                result = run_cost_model(work, quick=quick, title=title, timeout_s=timeout_s)
            else:
                result = run_module(name, module, title, quick, timeout_s, env, extra.get(name))
            result.mode = "quick" if quick else "scaled" if sized_by in extra else "full"
            if result.status == "ok":  # figures from a shared machine: how busy it was beside them
                result.notes.append(f"Load average (1, 5, 15 min, /proc/loadavg) on {os.cpu_count()} cores: "
                                    f"{_load(load_before)} at the start, {_load(os.getloadavg())} at the end.")
            print(f"[bench] {name}: {result.status} {result.reason} ({result.seconds:.0f} s)", file=sys.stderr,
                  flush=True)
            for row in result.rows:
                print(f"[bench]   {row.what}: ours {row.ours}, {row.anchor_name} {row.anchor}, ratio {row.ratio}, "
                      f"{row.goal}, met {row.met}", file=sys.stderr, flush=True)
            results.append(result)
    path = write(results, machine, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
