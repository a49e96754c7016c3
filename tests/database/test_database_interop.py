"""`tune db import` / `tune db export` against a MetaSchedule database written by TVM itself."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace

import pytest
import tvm
from tvm import te

from database import open_database
from database.interop import RECORD_FILE, WORKLOAD_FILE
from measure.tvmapi import (
    ArgInfo,
    JSONDatabase,
    PrimFunc,
    Schedule,
    TuningRecord,
    make_target,
    target_json,
    trace_to_json,
)
from tuner.cli import app
from tuner.cli.errors import main_guard


def _matmul() -> PrimFunc:
    a = te.placeholder((8, 8), "float32", name="a")
    b = te.placeholder((8, 8), "float32", name="b")
    k = te.reduce_axis((0, 8), name="k")
    c = te.compute((8, 8), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


matmul = _matmul()


TARGET = {"kind": "llvm", "num-cores": 1}


@pytest.fixture
def ms_dir(tmp_path):
    """A MetaSchedule JSON database: two scheduled matmuls timed, one failed run (1e10)."""
    directory = tmp_path / "ms"
    directory.mkdir()
    ms_db = JSONDatabase(str(directory / WORKLOAD_FILE), str(directory / RECORD_FILE))
    mod = tvm.IRModule({"main": matmul})
    workload = ms_db.commit_workload(mod)
    for factor, run_secs in ((2, [2.0e-6, 2.1e-6]), (4, [1.5e-6, 1.4e-6]), (8, [1e10])):
        sch = Schedule(mod)
        i, _, _ = sch.get_loops(sch.get_sblock("C"))
        sch.split(i, [None, factor])
        ms_db.commit_tuning_record(TuningRecord(sch.trace, workload, run_secs, make_target(TARGET),
                                                ArgInfo.from_prim_func(matmul)))
    return directory


def tune_db(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tune", "db", *args])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def ms_records(directory) -> list[tuple[str, list[float], str]]:
    ms_db = JSONDatabase(str(directory / WORKLOAD_FILE), str(directory / RECORD_FILE), allow_missing=False)
    return sorted((trace_to_json(r.trace), [float(t) for t in r.run_secs], target_json(r.target))
                  for r in ms_db.get_all_tuning_records())


def our_records(url: str) -> list[tuple]:
    with open_database(url) as db:
        return sorted((r.candidate_hash, r.workload_hash, r.status, r.times_s, trace)
                      for t in db.targets() for r, trace in db.measure_results(t.target_hash))


def test_import_twice_export_and_back(db_url, ms_dir, tmp_path, monkeypatch, capsys):
    code, out, err = tune_db(monkeypatch, capsys, "import", str(ms_dir), "--db", db_url, "--json")
    assert code == 0, err
    assert json.loads(out) == {"workloads": 1, "records": 3, "measure_results": 3, "skipped": 0}
    first = our_records(db_url)
    assert sorted(r[2] for r in first) == ["ok", "ok", "run_error"]
    with open_database(db_url) as db:
        assert db.get_workload(first[0][1]).op_kind == "matmul"  # read from its blocks: the record has no name
    assert {(1.5e-6, 1.4e-6), (2.0e-6, 2.1e-6)} == {r[3] for r in first if r[2] == "ok"}

    code, out, _ = tune_db(monkeypatch, capsys, "import", str(ms_dir), "--db", db_url, "--json")
    assert code == 0 and json.loads(out)["measure_results"] == 0  # the same directory again adds nothing
    assert our_records(db_url) == first
    with open_database(db_url) as db:  # a re-measurement of a leader is not a trial: not exported
        (target,) = db.targets()
        timed = next(r for r, _ in db.measure_results(target.target_hash) if r.status == "ok")
        db.add_measure_results([replace(timed, times_s=(9e-6,), confirm=True)])

    out_dir = tmp_path / "exported"
    code, _, err = tune_db(monkeypatch, capsys, "export", str(out_dir), "--db", db_url)
    assert code == 0, err
    assert ms_records(out_dir) == ms_records(ms_dir)  # MetaSchedule sees the records it wrote

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, _, err = tune_db(monkeypatch, capsys, "import", str(out_dir), "--db", fresh)
    assert code == 0, err
    assert our_records(fresh) == first  # exported and imported back: unchanged


@pytest.mark.parametrize("damage", ["truncated-record", "not-json-workload", "missing-file"])
def test_corrupt_import_writes_nothing(ms_dir, tmp_path, monkeypatch, capsys, damage):
    bad = tmp_path / "bad"
    shutil.copytree(ms_dir, bad)
    if damage == "truncated-record":  # the first records are fine, the last is cut short
        text = (bad / RECORD_FILE).read_text()
        (bad / RECORD_FILE).write_text(text[: len(text) - 40] + "\n")
    elif damage == "not-json-workload":
        (bad / WORKLOAD_FILE).write_text("this is not json\n")
    else:
        (bad / RECORD_FILE).unlink()
    url = f"sqlite:///{tmp_path / 't.db'}"
    code, _, err = tune_db(monkeypatch, capsys, "import", str(bad), "--db", url)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(bad) in lines[0]
    with open_database(url) as db:
        assert set(db.stats().values()) == {0}
