"""Benchmark result records, this machine's description, and one timer for every contender.

A benchmark returns a :class:`BenchResult`: rows of (what, ours, anchor, ratio,
goal, met), a status (``ok`` or ``not run`` with the reason), free-form notes and
plot data. Results travel as JSON between processes (each benchmark of another
module runs as a subprocess and prints one JSON object), so records are plain
dataclasses with ``to_json``/``from_json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Row:
    """One line of a benchmark table.

    Attributes
    ----------
    what : str
        What is compared (kernel, stage, metric), with its unit.
    ours, anchor : float or None
        Our figure and the anchor's, in the unit ``what`` names (None: not measured).
    anchor_name : str
        The anchor (``numpy``, ``MetaSchedule tune_tir``, ``TenSet XGBoost (published)``...).
    ratio : float or None
        The figure the goal is judged on (its meaning is in ``goal``).
    goal : str
        The goal in words, e.g. ``ratio >= 0.9``.
    met : bool or None
        Whether the goal is met; None when it could not be judged.
    """

    what: str
    ours: float | None
    anchor: float | None
    anchor_name: str
    ratio: float | None
    goal: str
    met: bool | None


@dataclass
class BenchResult:
    """The outcome of one benchmark.

    Attributes
    ----------
    name : str
        Short name (``kernels``, ``sample_efficiency``, ``service``...), the ``--only`` key.
    title : str
        Heading in BENCHMARKS.md.
    status : str
        ``ok``, or ``not run`` when the benchmark could not run (``reason`` says why).
    rows : list of Row
        The table.
    notes : list of str
        Method and caveats, one sentence each.
    plot : dict
        Data for the benchmark's plot (``kind`` plus series), drawn by :mod:`bench.markdown`.
    reason : str
        Why the benchmark did not run (empty when it ran).
    command : str
        The command that produced it.
    seconds : float
        Wall time it took.
    mode : str
        ``quick`` (small sizes, a smoke run) or ``full`` (the issue's sizes); set by the
        suite runner, empty for a result of a module run on its own.
    """

    name: str
    title: str
    status: str = "ok"
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plot: dict = field(default_factory=dict)
    reason: str = ""
    command: str = ""
    seconds: float = 0.0
    mode: str = ""

    def to_json(self) -> dict:
        """Plain JSON values."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> BenchResult:
        """The inverse of :meth:`to_json`."""
        data = dict(data)
        data["rows"] = [Row(**r) for r in data.get("rows", [])]
        return cls(**data)

    @classmethod
    def not_run(cls, name: str, title: str, reason: str, command: str = "") -> BenchResult:
        """A benchmark that could not run, with the reason."""
        return cls(name=name, title=title, status="not run", reason=reason, command=command)


def ratio_row(what: str, ours: float | None, anchor: float | None, anchor_name: str, goal_ratio: float,
              goal: str, higher_is_better: bool = True) -> Row:
    """A row whose ratio is ``ours / anchor`` (``anchor / ours`` when lower is better) and goal
    ``ratio >= goal_ratio``."""
    if ours is None or anchor is None or ours <= 0 or anchor <= 0:
        return Row(what, ours, anchor, anchor_name, None, goal, None)
    ratio = ours / anchor if higher_is_better else anchor / ours
    return Row(what, ours, anchor, anchor_name, ratio, goal, bool(ratio >= goal_ratio))


def positive_int(text: str) -> int:
    """argparse ``type`` for a count that must be at least 1 (trials, repeats, sizes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def bench_parser(module: str, description: str) -> argparse.ArgumentParser:
    """The ``argparse.ArgumentParser`` of ``python -m bench.MODULE``: no option abbreviations
    (``--qui`` must not become ``--quick`` behind ``python -m bench``'s back)."""
    return argparse.ArgumentParser(prog=f"python -m bench.{module}", description=description, allow_abbrev=False)


def check_model_option(parser: argparse.ArgumentParser, model: str | None) -> None:
    """``parser.error`` (exit 2) naming the problem unless ``model`` (``--model``) is None or a model
    :func:`extract.check_model` takes."""
    if model:
        from extract import ModelImportError, check_model

        try:
            check_model(model)
        except ModelImportError as exc:
            parser.error(f"--model: {exc}")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    """The installed distribution's version (``importlib.metadata``), else the module's ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        pass
    try:
        return str(getattr(__import__(module), "__version__", "?"))
    except Exception:  # noqa: BLE001 - a missing or broken package is reported, not raised
        return "not installed"


def machine_info(command: str) -> dict:
    """This machine and run: CPU model, cores, host CPU name as LLVM sees it, versions, date, command."""
    info = {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    for module in ("tvm", "torch", "numpy", "xgboost", "egglog", "sqlalchemy"):
        info[module] = _version(module)
    try:
        from measure.tvmapi import host_cpu

        info["llvm_cpu"] = host_cpu()
    except Exception:  # noqa: BLE001
        info["llvm_cpu"] = "?"
    return info


SETTLE_S = 0.3
"""Seconds of idle before each timed repeat (:func:`median_times`)."""


def median_time(call: Callable[[int], object], variants: int, repeat: int = 7, min_repeat_s: float = 0.05) -> float:
    """Median seconds of one call of ``call`` (:func:`median_times` with one contender, no idle between repeats)."""
    return median_times({"call": call}, variants, repeat, min_repeat_s, settle_s=0.0)["call"]


def median_times(calls: dict[str, Callable[[int], object]], variants: int, repeat: int = 7,
                 min_repeat_s: float = 0.05, settle_s: float = SETTLE_S,
                 between: Callable[[int], None] | None = None) -> dict[str, float]:
    """Median seconds of one call of each contender, the same protocol for every one, interleaved.

    ``calls[name](i)`` runs the operation on argument set ``i`` (``0 <= i < variants``);
    each repeat sweeps the argument sets in turn (so data that should come from main
    memory is not left in cache by the previous call) and lasts at least
    ``min_repeat_s`` seconds; one warm-up sweep first. The contenders take turns,
    one repeat each, in an order that rotates every round, so a slow spell of a
    shared machine falls on all of them rather than on whichever ran then. Before
    each repeat the timer sleeps ``settle_s`` seconds, so the worker threads of the
    contender before it have stopped spinning: OpenBLAS's idle threads busy-wait
    for about 2^28 cycles (its ``THREAD_TIMEOUT``, a fraction of a second) and would
    take a core from the next contender (see docs/decisions.md, "Benchmark timer: the
    contenders settle between turns"). After each round ``between(r)`` runs, when
    given: contenders timed in processes of their own take their turn there
    (:meth:`tuner.contender.Contenders.time_round`). Returns each contender's median
    over ``repeat`` repeats of (repeat time / calls).
    """
    names = list(calls)
    number = {}
    for name in names:
        call = calls[name]
        for i in range(variants):
            call(i)
        start = time.perf_counter()
        call(0)
        once = max(time.perf_counter() - start, 1e-7)
        number[name] = max(variants, int(min_repeat_s / once) // variants * variants or variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            call, n_calls = calls[name], number[name]
            time.sleep(settle_s)
            start = time.perf_counter()
            for n in range(n_calls):
                call(n % variants)
            times[name].append((time.perf_counter() - start) / n_calls)
        if between is not None:
            between(r)
    return {name: statistics.median(t) for name, t in times.items()}


def variants_for(bytes_per_set: int, floor_bytes: int = 64 << 20) -> int:
    """Argument sets needed so one sweep touches at least ``floor_bytes`` (default 64 MiB, twice a 32 MiB LLC).

    This is STREAM's sizing rule (arrays of at least 4x the cache, here summed over the sets) applied to weights.
    """
    return max(1, -(-floor_bytes // max(bytes_per_set, 1)))


def print_result(result: BenchResult, as_json: bool) -> None:
    """Print a benchmark module's result: one JSON object (``--json``, what ``python -m bench`` reads), else its
    rows and notes as lines of text."""
    if as_json:
        print(json.dumps(result.to_json()))
        return
    for row in result.rows:
        print(f"{row.what}: ours {fmt(row.ours)}, {row.anchor_name} {fmt(row.anchor)}, ratio {fmt(row.ratio)} "
              f"({row.goal}, met: {row.met})")
    for note in result.notes:
        print(note)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table (``-`` when missing)."""
    if value is None:
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}e}"


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return statistics.median(values)
