"""`tune dataset collect`: measures a tiny model's workloads, resumes without measuring again, stops in time."""

from __future__ import annotations

import pytest

from database import open_database
from database.dataset_file import dataset_stats, export_dataset
from tuner.cost_model.xgb import FEATURE_VERSION
from tuner.dataset.collect import COLLECTOR_ARG, CollectOptions, Collector
from tuner.dataset.plan import Source, default_models, default_plan
from tuner.options import TuneError

TINY = [Source("qwen3-tiny", "decode", 1, 16)]


def test_plan_covers_every_shipped_model_and_refuses_unknown_ones():
    plan = default_plan()
    assert {s.model for s in plan} == set(default_models()) and not any(m.endswith("-tiny") for m in default_models())
    assert {s.stage for s in plan} == {"prefill", "decode", "prefill-kv"}
    assert len({(s.seq_len, s.kv_len) for s in plan}) > 3
    with pytest.raises(ValueError, match="unknown model 'gpt-2'"):
        default_plan(["gpt-2"])
    with pytest.raises(TuneError, match="--budget"):
        CollectOptions(budget=0)


@pytest.mark.slow
def test_collect_resumes_and_exports(tmp_path):
    url = f"sqlite:///{tmp_path / 'collect.db'}"
    options = CollectOptions(db=url, budget=1, candidates=1, confirm_top=0)
    first = Collector(options, TINY).run()
    assert first.stop_reason == "plan done" and first.sources == [TINY[0].label()]
    assert first.workloads > 3 and first.measured == first.workloads  # each workload's default schedule
    again = Collector(options, TINY).run()
    assert again.measured == 0 and again.sources == first.sources  # resumed: nothing measured twice
    with open_database(url) as db:
        sessions = db.sessions()
        assert [s["args"][COLLECTOR_ARG] for s in sessions] == [True, True]
        assert sessions[0]["args"]["cpu"]["cores"] >= 1 and len(sessions[0]["args"]["load_average"]) == 3
        export_dataset(db, tmp_path / "d.jsonl.gz", FEATURE_VERSION)
    stats = dataset_stats(tmp_path / "d.jsonl.gz")
    assert stats["records"] == stats["candidates"] == first.measured and stats["workloads"] == first.workloads
    assert stats["model"] == {"qwen3-tiny decode": first.measured}
    stopped = Collector(CollectOptions(db=url, budget=2, time_limit_s=1e-3), TINY).run()
    assert stopped.stop_reason == "time limit" and stopped.measured == 0 and stopped.sources == []
