"""The closing summary of a run: a table per kernel and the end-to-end latencies."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .load import busy_warning, load_line
from .memory import memory_line
from .peers import LABELS
from .progress import fmt_us
from .session import RunSummary


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def _us(seconds: float | None) -> str:
    return fmt_us(seconds) if seconds is not None else "-"


def peer_line(summary: RunSummary) -> str | None:
    """The fastest peer that was timed and how the tuned program compares, plus any peer not timed and why;
    None when no peer was built (``--no-peers``, or a model without a PyTorch module)."""
    if not summary.peers:
        return None
    lat = summary.latency_s
    timed = [p for p in summary.peers if lat.get(p["name"])]
    parts = []
    if timed:
        best = min(timed, key=lambda p: lat[p["name"]])
        ratio = f" ({lat[best['name']] / lat['tuned']:.2f}x the tuned program's time)" if lat.get("tuned") else ""
        parts.append(f"fastest peer: {LABELS[best['name']]} {_ms(lat[best['name']])} ms{ratio}")
    parts += [f"{LABELS[p['name']]}: {p['status']} ({p['error']})" for p in summary.peers if p["status"] != "ok"]
    return "; ".join(parts)


def quantization_line(quant: dict) -> str:
    """The weights' format and bytes, check (a) and what quantization costs against the float32 layer (check (b))."""
    fmt = quant["weights_dtype"] + (f" group {quant['group_size']}" if quant["group_size"] else "")
    size = quant["weight_bytes"]
    line = (f"weights {fmt}: {size['resident'] / 1e6:.3f} MB resident ({size['ratio']:.3f}x float32's "
            f"{size['float32'] / 1e6:.3f} MB); max abs error vs the float64 reference of the same quantized model "
            f"{quant['reference_max_abs_error']:.2e} (tolerance {quant['check_tolerance']:g})")
    cost = quant["vs_float32"]
    if cost:
        line += (f"; vs the float32 layer: max abs error {cost['max_abs_error']:.3g}, "
                 f"relative {cost['max_rel_error']:.3g}")
    return line


def print_summary(summary: RunSummary, console: Console) -> None:
    """Print the kernel table (like MetaSchedule's) and the end-to-end comparison."""
    table = Table(title=f"session {summary.session_id}: {summary.model}")
    for col in ("kernel", "kind", "calls", "MFLOP", "default us", "best us", "GFLOP/s", "trials", "new"):
        table.add_column(col, justify="left" if col in ("kernel", "kind") else "right")
    for k in summary.kernels:
        table.add_row(
            k.name[:56], k.op_kind, str(k.calls), f"{k.flops / 1e6:.2f}", _us(k.default_latency_s),
            _us(k.latency_s) + (" (pred)" if k.predicted else ""),
            f"{k.gflops:.2f}" if k.gflops else "-", str(k.trials), str(k.new_trials),
        )
    console.print(table)
    lat = summary.latency_s
    e2e = Table(title="end-to-end latency (median over repeats)")
    for col in ("program", "ms", "vs tuned"):
        e2e.add_column(col, justify="left" if col == "program" else "right")
    rows = [("tuned", "tuned (this run)"), ("tvm_default", "TVM default build"), ("torch_eager", "PyTorch eager")]
    rows += [(p["name"], LABELS[p["name"]]) for p in summary.peers]
    for name, label in rows:
        ratio = f"{lat[name] / lat['tuned']:.2f}x" if lat.get(name) and lat.get("tuned") else "-"
        e2e.add_row(label, _ms(lat.get(name)), ratio)
    console.print(e2e)
    if line := peer_line(summary):
        console.print(line, markup=False)
    if summary.tvm_default.get("reused"):
        console.print(f"TVM default build: reused from session {summary.tvm_default['session_id']} "
                      "(--retime-default times it again)")
    if summary.load_average:
        console.print(load_line(summary.load_average))
        if warning := busy_warning(summary.load_average):
            console.print(warning, style="bold yellow", markup=False)
    if summary.memory:
        console.print(memory_line(summary.memory), markup=False)
    rewrites = ", ".join(summary.graph["rewrites"]) or "none (original program)"
    console.print(f"program: {summary.graph['term_hash'][:12]} rewrites: {rewrites}")
    console.print(f"artifact: {summary.artifact}  (max abs error vs reference {summary.max_abs_error:.2e})")
    if summary.quantization:
        console.print(quantization_line(summary.quantization), markup=False)
    console.print(f"measured this session: {summary.measured_trials} trials"
                  + (f", and {summary.confirm_measurements} re-measurements of the kernels' leaders"
                     if summary.confirm_measurements else ""))
