"""`tune run --weights-dtype` end to end on a tiny Qwen3 decode layer: real builds, worker and database."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # tunes, builds and starts processes

RUNS = {  # format label -> its options; int4 also goes through the e-graph's second candidate
    "bfloat16": ("--weights-dtype", "bfloat16", "--candidates", "1"),
    "int8": ("--weights-dtype", "int8", "--candidates", "1"),
    "int4-g32": ("--weights-dtype", "int4", "--candidates", "2"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """One run per low-bit format on one database, one trial per kernel (its default schedule, checked)."""
    work = tmp_path_factory.mktemp("quantized")
    summaries = {}
    for label, options in RUNS.items():
        proc = subprocess.run(
            [sys.executable, "-m", "tuner", "run", "qwen3-tiny", "--stage", "decode", "--kv-len", "16", "--trials",
             "1", "--measure-top", "1", "--repeat", "2", "--min-repeat-ms", "5", "--db", f"sqlite:///{work}/t.db",
             *options, "--json", "-q"],
            cwd=work, capture_output=True, text=True, timeout=900,
        )
        assert proc.returncode == 0, proc.stderr
        summaries[label] = json.loads(proc.stdout)
    return summaries


@pytest.mark.parametrize("label", list(RUNS))
def test_check_a_passes_and_check_b_is_reported(runs, label):
    summary = runs[label]
    quant = summary["quantization"]
    assert summary["model"].endswith(f"weights={label}")
    # (a) against the float64 reference of the same quantized model, tight
    assert quant["reference_max_abs_error"] == summary["max_abs_error"] < quant["check_tolerance"] <= 1e-4
    # (b) what quantization costs against the float32 layer: reported, far above (a)
    cost = quant["vs_float32"]
    assert set(cost["outputs"]) == {"hidden_states", "key_0", "value_0"}
    assert cost["max_abs_error"] > 10 * quant["reference_max_abs_error"]
    assert 0 < cost["max_rel_error"] < 1


@pytest.mark.parametrize("label", list(RUNS))
def test_the_quantized_gemms_are_kernels_of_their_own_measured_and_checked(runs, label):
    summary = runs[label]
    dtype = label.split("-")[0]
    gemms = [k for k in summary["kernels"] if f"dense_{dtype}" in k["name"]]  # alone or with a fused epilogue
    assert sum(k["calls"] for k in gemms) == 7, [k["name"] for k in summary["kernels"]]  # q, k, v, o, gate, up, down
    assert all(k["trials"] >= 1 and not k["predicted"] and k["latency_s"] > 0 for k in gemms)


def test_resident_weight_bytes_per_format(runs):
    sizes = {label: runs[label]["quantization"]["weight_bytes"] for label in RUNS}
    for label, size in sizes.items():
        assert size["resident"] == size["by_format"][label]
        assert size["ratio"] == pytest.approx(size["resident"] / size["float32"])
        assert size["float32"] == size["by_format"]["float32"]
    assert sizes["int4-g32"]["ratio"] <= 0.3  # scales included
    assert sizes["int4-g32"]["resident"] < sizes["int8"]["resident"] < sizes["bfloat16"]["resident"]
    # the worst quantization error is int4's
    errors = {label: runs[label]["quantization"]["vs_float32"]["max_abs_error"] for label in RUNS}
    assert errors["int4-g32"] == max(errors.values())
