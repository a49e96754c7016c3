"""`tune model` and `tune simulate` on a database of real timings of sampled schedules of tiny matmuls."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import te
from typer.testing import CliRunner

from database import MeasureRecord, TargetRecord, WorkloadRecord, open_database
from measure.rpc import LOCAL_KEY
from measure.tvmapi import estimate_flops, kernel_hash, make_target, target_json
from tuner.cli import app
from tuner.cost_model.store import load_warm_model, other_feature_versions
from tuner.cost_model.xgb import FEATURE_VERSION
from tuner.space.space import ScheduleSpace

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier

TARGET = '{"kind": "llvm", "num-cores": 1}'


def tune(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _matmul(m: int, n: int, k: int):
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def _timed_database(url: str, shapes) -> None:
    """Real timings of the default and six sampled schedules of a tiny matmul per (m, n, k), built and timed
    in-process."""
    target = make_target(json.loads(TARGET))
    rec = TargetRecord(target_json(target), LOCAL_KEY)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    db = open_database(url)
    try:
        db.add_target(rec)
        for m, n, k in shapes:
            func = _matmul(m, n, k)
            wh = kernel_hash(func)
            db.add_workload(WorkloadRecord(wh, f"matmul_{m}x{n}x{k}", "matmul", func.script(), "[]",
                                           estimate_flops(func), 4.0 * (m * k + k * n + m * n)))
            space = ScheduleSpace(func, wh, target)
            cands = [space.default()] + space.sample(6)
            db.add_candidates([c.record for c in cands])
            args = [tvm.runtime.tensor(rng.random(s).astype("float32"), dev) for s in ((m, k), (k, n), (m, n))]
            results = []
            for cand in cands:
                lib = tvm.compile(cand.mod, target=target).jit()
                times = lib.time_evaluator("main", dev, number=5, repeat=3)(*args).results
                results.append(MeasureRecord(cand.record.candidate_hash, wh, rec.target_hash, "ok", tuple(times)))
            db.add_measure_results(results)
    finally:
        db.close()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A database of real timings of sampled schedules of three tiny matmuls."""
    work = tmp_path_factory.mktemp("cm")
    url = f"sqlite:///{work}/t.db"
    _timed_database(url, ((16, 32, 16), (32, 16, 32), (8, 64, 16)))
    return work, url


def invoke(*args: str) -> dict:
    """Run a ``tune`` command in this process (TVM's schedule rules load once) and parse its --json output."""
    result = CliRunner().invoke(app, [*args, "--json"])
    if result.exception is not None:
        raise result.exception
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_eval_compares_models_on_held_out_workloads(tuned):
    work, url = tuned
    out = invoke("model", "eval", "--db", url, "--target", TARGET, "--models", "xgb:rank:pairwise,linear,random")
    assert out["workloads"] == 3 and out["records"] >= 3 * 4
    for name in ("xgb:rank:pairwise", "linear", "random"):
        m = out["models"][name]
        assert 0 < m["top1"] <= m["top5"] <= 1.0
        assert 0 <= m["pairwise"] <= 1 and -1 <= m["spearman"] <= 1
        assert m["by_kind"]["matmul"]["workloads"] == 3  # every workload here is a matmul
        for metric in ("top1", "top5", "pairwise", "spearman"):
            low, high = m["interval"][metric]
            assert low <= m[metric] <= high, (name, metric)
    agree = out["repeat_agreement"]  # three repeats each: first two against the third
    assert agree["workloads"] == 3 and 0 < agree["top1"] <= 1.0 and 0 <= agree["pairwise"] <= 1


def test_eval_takes_the_booster_size(tuned):
    work, url = tuned
    small = invoke("model", "eval", "--db", url, "--target", TARGET, "--models", "xgb:reg:latency",
                   "--trees", "2", "--max-bin", "2")["models"]["xgb:reg:latency"]
    default = invoke("model", "eval", "--db", url, "--target", TARGET, "--models", "xgb:reg:latency",
                     )["models"]["xgb:reg:latency"]
    assert 0 < small["top1"] <= 1 and small != default, "two trees over two bins rank differently"


def test_eval_and_simulate_trained_on_another_database_judge_only_unseen_workloads(tuned, tmp_path):
    work, url = tuned
    earlier = f"sqlite:///{tmp_path}/earlier.db"
    _timed_database(earlier, ((16, 32, 16), (16, 16, 16)))  # one workload shared with the evaluated database
    out = invoke("model", "eval", "--db", url, "--train-db", earlier, "--target", TARGET,
                 "--models", "xgb:reg:latency,random")
    assert out["train_workloads"] == 2 and out["train_records"] >= 2 * 4
    assert out["unseen_workloads"] == 2 and out["judged_records"] < out["records"]
    assert out["judged_records"] == out["unseen_records"]  # each unseen workload has its 2 candidates and more
    for name in ("xgb:reg:latency", "random"):
        m = out["models"][name]
        assert m["workloads"] == 2 and 0 < m["top1"] <= m["top5"] <= 1.0
    assert out["repeat_agreement"]["workloads"] == 2  # the measurements judged on the same unseen workloads
    replay = invoke("simulate", "--db", url, "--train-db", earlier, "--target", TARGET, "--seeds", "1",
                    "--strategies", "random,warm")
    assert replay["workloads"] == 2 and all(v[-1] == pytest.approx(1.0) for v in replay["curves"].values())
    assert replay["db_workloads"] == 3 and replay["train_workloads"] == 2
    text = tune("simulate", "--db", url, "--train-db", earlier, "--target", TARGET, "--seeds", "1",
                "--strategies", "random", cwd=work)
    assert text.returncode == 0 and "2 of the 3 --db workloads" in text.stdout and "warm starts" not in text.stdout
    # the same file spelled another way: a dot in its path, a file: URI
    spellings = (url.replace(f"sqlite:///{work}/", f"sqlite:///{work}/./"),
                 url.replace("sqlite:///", "sqlite:///file:") + "?uri=true")
    for command, same in itertools.product(("model eval", "simulate"), spellings):
        one_line_error(tune(*command.split(), "--db", url, "--train-db", same, "--target", TARGET, cwd=work),
                       "--train-db is the same database as --db")
    for command in ("model eval", "simulate"):
        one_line_error(tune(*command.split(), "--db", url, "--train-db", "", cwd=work), "--train-db is empty")
    missing = tune("model", "eval", "--db", url, "--train-db", f"sqlite:///{tmp_path}/none.db", "--target", TARGET,
                   cwd=work)
    one_line_error(missing, "give --train-db the URL")


def test_train_list_and_warm_start(tuned):
    work, url = tuned
    out = invoke("model", "train", "--db", url, "--target", TARGET)
    assert out["trained"] and out["version"] >= 1 and out["records"] >= 16
    assert out["metrics"]["workloads"] >= 2
    listed = invoke("model", "list", "--db", url)["versions"]
    newest = listed[0]
    assert newest["id"] == out["version"] and newest["feature_version"] == FEATURE_VERSION
    assert newest["record_count"] == out["records"] and newest["metrics"]["span"][0] <= newest["metrics"]["span"][1]
    db = open_database(url)
    try:
        target_hash = newest["target_hash"]
        assert load_warm_model(db, target_hash) is not None
        assert load_warm_model(db, "0" * 64) is None  # another target: never used
        # a corrupt newest version is skipped with a message; the previous one is used
        con = sqlite3.connect(f"{work}/t.db")
        con.execute("insert into cost_model_version (target_id, feature_version, booster, record_count, metrics, "
                    "created_at) select target_id, feature_version, x'00ff', 1, '{}', created_at "
                    "from cost_model_version where id = ?", (out["version"],))
        con.execute("insert into cost_model_version (target_id, feature_version, booster, record_count, metrics, "
                    "created_at) select target_id, 'other-features/v0', booster, 1, '{}', created_at "
                    "from cost_model_version where id = ?", (out["version"],))
        con.commit()
        con.close()
        warned = []
        assert load_warm_model(db, target_hash, warn=warned.append) is not None
        assert len(warned) == 1 and "corrupt" in warned[0]
        assert other_feature_versions(db, target_hash) == ["other-features/v0"]  # stored, never loaded
        assert other_feature_versions(db, "0" * 64) == []
    finally:
        db.close()


def test_simulate_prints_curves(tuned):
    work, url = tuned
    out = invoke("simulate", "--db", url, "--target", TARGET, "--seeds", "1", "--strategies", "random,warm,shipped")
    # tiny matmuls the shipped model's data set never measured: every workload is replayed
    assert out["workloads"] == 3 and out["shipped_unseen_workloads"] == 3 and len(out["curves"]) == 3
    for values in out["curves"].values():
        assert all(0 <= v <= 1 for v in values) and values[-1] == pytest.approx(1.0)
        assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))  # best-so-far never worsens
    largest = len(next(iter(out["curves"].values())))
    within = out["trials_to_within_5pct"]
    assert set(within) == set(out["curves"])
    for name, row in within.items():
        per = list(row["per_workload"].values())
        assert len(per) == 3 and all(1 <= t <= largest for t in per)
        assert row["mean"] == pytest.approx(np.mean(per)) and row["median"] == pytest.approx(np.median(per))
        assert row["interval"][0] <= row["mean"] <= row["interval"][1]
        # after as many trials as it needs, the mean curve has found each pool's best within 5% ...
        assert out["curves"][name][int(max(per)) - 1] >= 1 / 1.05 - 1e-9
    assert within["random b=8 e=1"]["to_random"] == pytest.approx(1.0)


def test_too_few_records_fall_back_to_the_roofline(tuned, tmp_path):
    work, _ = tuned
    db = tmp_path / "few.db"
    src = sqlite3.connect(f"{work}/t.db")
    src.backup(dst := sqlite3.connect(db))
    dst.execute("delete from measure_result where id not in (select min(id) from measure_result)")
    dst.commit()
    src.close()
    dst.close()
    out = invoke("model", "train", "--db", f"sqlite:///{db}", "--target", TARGET, "--peak-gflops", "100",
                 "--bandwidth-gbs", "10")
    assert not out["trained"] and out["records"] == 1 and "roofline" in out["message"]
    with pytest.raises(ValueError, match="at least 2"):
        invoke("model", "eval", "--db", f"sqlite:///{db}", "--target", TARGET)


def test_judged_rows_count_the_candidates_of_workloads_with_enough_of_them():
    import numpy as np

    from tuner.cli.model import _judged_rows

    groups = np.array(["a", "b", "a", "c", "c", "a"], dtype=object)
    assert _judged_rows(groups, 2) == 5 and _judged_rows(groups, 3) == 3 and _judged_rows(groups, 4) == 0
    assert _judged_rows(groups[:0], 2) == 0


def test_bad_input_is_one_line(tuned, tmp_path):
    work, url = tuned
    one_line_error(tune("model", "eval", "--db", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path), "no database")
    one_line_error(tune("model", "train", "--db", url, "--target", '{"kind": "llvm", "num-cores": 3}', cwd=work),
                   "no measurements for target", "num-cores")
    for args, needle in ((("model", "train", "--objective", "reg:magic"), "unknown objective"),
                         (("simulate", "--strategies", "psychic"), "unknown strategy"),
                         (("simulate", "--explore", "2"), "--explore must lie within"),
                         (("simulate", "--batch-size", "0"), "--batch-size must be at least 1"),
                         (("simulate", "--seeds", "0"), "--seeds must be at least 1"),
                         (("simulate", "--trials", "-1"), "--trials must be at least 1"),
                         (("model", "eval", "--models", "oracle"), "unknown model"),
                         (("model", "eval", "--trees", "0"), "--trees must be at least 2"),
                         (("model", "eval", "--min-candidates", "1"), "--min-candidates must be at least 2"),
                         (("model", "eval", "--min-candidates", "1000"), "no judged workload has 1000 or more")):
        with pytest.raises(ValueError, match=needle):
            invoke(*args, "--db", url, "--target", TARGET)
