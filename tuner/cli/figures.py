"""How the model and data set commands print: text lines or one JSON object, a mean with its interval, per op kind."""

from __future__ import annotations

import json
import sys

import typer


def emit(as_json: bool, data: dict, lines: list[str]) -> None:
    """``data`` as one JSON object on stdout with ``as_json``, else ``lines`` one by one."""
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        for line in lines:
            typer.echo(line)


def fmt(value) -> str:
    """A figure with 3 decimals, ``-`` for None."""
    return "-" if value is None else f"{value:.3f}"


def workloads_text(n: int) -> str:
    """``1 workload``, ``2 workloads``."""
    return f"{n} workload" + ("" if n == 1 else "s")


def with_interval(result: dict, metric: str) -> str:
    """``0.850 [0.790,0.901]``: a metric's mean and its bootstrap interval (``-`` where there is none)."""
    bounds = result["interval"][metric]
    tail = "" if bounds is None else f" [{bounds[0]:.3f},{bounds[1]:.3f}]"
    return fmt(result[metric]) + tail


def by_kind_lines(results: dict) -> list[str]:
    """Top-1 and pairwise accuracy per op kind, one row per model (kinds with a measured pair only)."""
    first = next(iter(results.values()))["by_kind"]
    kinds = [k for k, m in first.items() if m["workloads"]]
    if len(kinds) < 2:
        return []
    heads = [f"{k} ({first[k]['workloads']})" for k in kinds]
    lines = []
    for metric, label in (("top1", "top-1"), ("pairwise", "pairwise")):
        lines.append(f"{label} by op kind (workloads):")
        lines.append(f"{'model':<20} " + " ".join(f"{h:>17}" for h in heads))
        lines += [f"{name:<20} " + " ".join(f"{fmt(r['by_kind'][k][metric]):>17}" for k in kinds)
                  for name, r in results.items()]
    return lines
