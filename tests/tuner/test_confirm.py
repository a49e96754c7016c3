"""Confirming a kernel's leaders: the fastest candidates are measured again until each has three measurements."""

from __future__ import annotations

from database import MeasureRecord, TargetRecord, canonical_json, open_database
from measure.tvmapi import make_target
from tuner.confirm import confirm_leaders
from tuner.node_prices import node_kernel
from tuner.space import ScheduleSpace

# Latencies (seconds) the candidates' first measurements gave, and what any later one gives: candidate 0 was
# lucky once. Assigned, not measured: what is under test is which candidates are measured again, how often.
FIRST = [1.0e-3, 1.2e-3, 1.3e-3, 1.4e-3, 2.0e-3]
LATER = [1.5e-3, 1.2e-3, 1.3e-3, 1.4e-3, 2.0e-3]


def test_leaders_are_measured_again_until_the_top_three_each_have_three_measurements(tmp_path):
    kernel = node_kernel("matmul", (1, 64), "float32", [(1, 64), (64, 64)])
    wh = kernel.workload.workload_hash
    space = ScheduleSpace(kernel.func, wh, make_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}))
    cands = [space.default(), *space.sample(8)][:5]
    assert len({c.record.candidate_hash for c in cands}) == 5
    index = {c.record.candidate_hash: i for i, c in enumerate(cands)}
    target = TargetRecord(canonical_json({"kind": "llvm"}), "local")
    db = open_database(f"sqlite:///{tmp_path}/tune.db")
    db.add_target(target)
    db.add_workload(kernel.workload)
    db.add_candidates([c.record for c in cands])
    db.add_measure_results([MeasureRecord(c.record.candidate_hash, wh, target.target_hash, "ok", (FIRST[i],) * 3)
                            for i, c in enumerate(cands)])
    calls = []

    def remeasure(k, batch, times):
        calls.append(([index[c.record.candidate_hash] for c in batch], times))
        records = [MeasureRecord(c.record.candidate_hash, wh, target.target_hash, "ok",
                                 (LATER[index[c.record.candidate_hash]],) * 3, confirm=True)
                   for r in range(max(times)) for c, n in zip(batch, times) if n > r]
        db.add_measure_results(records)
        return records

    def leaders(n):
        return db.candidate_latencies(wh, target.target_hash, n)

    taken = confirm_leaders(kernel, space, leaders, remeasure, top=3, measurements=3)
    # candidate 0 drops to 1.5 ms (median of 1.0, 1.5, 1.5), so candidate 3 enters the top three and is confirmed too
    assert calls == [([0, 1, 2], [2, 2, 2]), ([3], [2])]
    assert len(taken) == 8 and all(r.confirm for r in taken)
    rows = leaders(3)
    assert [(index[r.candidate_hash], r.measurements) for r in rows] == [(1, 3), (2, 3), (3, 3)]
    assert db.best(wh, target.target_hash)[1] == 1.2e-3
    assert confirm_leaders(kernel, space, leaders, remeasure, top=3, measurements=3) == []  # a rerun: nothing
    assert confirm_leaders(kernel, space, leaders, remeasure, top=0, measurements=3) == []
    assert len(calls) == 2
    db.close()
