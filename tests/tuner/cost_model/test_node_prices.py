"""E-node prices from tuned kernels: each GEMM-like node finds its kernel, and prices steer extraction."""

from __future__ import annotations

import pytest

from database import WorkloadRecord
from extract import load_model
from extract.egraph import explore
from extract.lang import node_name, subterms
from tuner.compile import prepare_weights
from tuner.cost_model.node_prices import KernelNodeCost, calibrated_roofline, node_kernel
from tuner.cost_model.roofline import RooflineCostModel
from tuner.kernels import kernels_of, lower_to_kernels


@pytest.fixture(scope="module")
def exploration():
    return explore(load_model("qwen3-tiny", stage="decode", kv_len=4).mod, max_candidates=6)


@pytest.fixture(scope="module")
def kernels(exploration):
    """name prefix -> workload hashes of the candidates' per-run kernels."""
    found: dict[str, set[str]] = {}
    for cand in exploration.candidates:
        for k in kernels_of(lower_to_kernels(prepare_weights(cand.mod))):
            found.setdefault(k.name.rstrip("0123456789"), set()).add(k.workload.workload_hash)
    return found


def test_gemm_nodes_rebuild_the_candidates_kernels(kernels):
    # tiny Qwen3: hidden 64, 4 query heads and 2 K/V heads of 16, intermediate 128
    down = node_kernel("dense_packed", (1, 64), "float32", [(1, 128), (64, 128)])
    qkv = node_kernel("merged_dense_packed", (1, 128), "float32", [(1, 64), (128, 64)])
    o_proj = node_kernel("matmul", (1, 64), "float32", [(1, 64), (64, 64)])
    assert down.workload.workload_hash in kernels["dense_packed"]
    assert qkv.workload.workload_hash in kernels["dense_packed"]
    assert o_proj.workload.workload_hash in kernels["matmul"]
    assert node_kernel("add", (1, 64), "float32", [(1, 64), (1, 64)]) is None
    assert node_kernel("dense", None, "float32", [(1, 64), (64, 64)]) is None


def _gemm_counts(term) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sub in subterms(term):
        name = node_name(sub) or ""
        if "dense" in name or name == "matmul":
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("slow", ["packed", "plain"])
def test_tuned_prices_steer_extraction(exploration, kernels, slow):
    """Packed kernels priced slow: no packed node is extracted; plain GEMM kernels slow: packed ones are."""
    packed = kernels["dense_packed"]
    seconds = {wh: (1.0 if (wh in packed) == (slow == "packed") else 1e-6)
               for hashes in kernels.values() for wh in hashes}
    cost = KernelNodeCost(seconds, lambda workload: 1.0)  # kernels not tuned: as slow as the slow ones
    found = _gemm_counts(exploration.extract_best(cost).term)
    assert cost.priced > 0
    packed_nodes = found.get("dense_packed", 0) + found.get("merged_dense_packed", 0)
    if slow == "packed":
        assert packed_nodes == 0, found
    else:
        assert packed_nodes > 0 and found.get("dense", 0) == found.get("matmul", 0) == 0, found


def test_calibrated_roofline_scales_by_the_tuned_kernels():
    roofline = RooflineCostModel(peak_flops_per_s=1e9, bandwidth_bytes_per_s=1e9)

    def workload(flops: float, nbytes: float) -> WorkloadRecord:
        return WorkloadRecord(workload_hash=f"{flops}-{nbytes}", name="k", op_kind="matmul", script="",
                              shapes_json="[]", flops=flops, bytes_moved=nbytes)

    tuned = [(workload(1e6, 0), 3e-3), (workload(0, 1e6), 2e-3), (workload(2e6, 0), 8e-3)]  # 3x, 2x, 4x
    assert calibrated_roofline(tuned, roofline)(workload(5e6, 0)) == pytest.approx(15e-3)
    assert calibrated_roofline([], roofline)(workload(5e6, 0)) == pytest.approx(5e-3)
    faster = [(workload(1e6, 0), 0.5e-3)]  # never below the roofline itself
    assert calibrated_roofline(faster, roofline)(workload(5e6, 0)) == pytest.approx(5e-3)
