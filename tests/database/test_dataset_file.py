"""`tune dataset export / import / stats`: the versioned data set file, on every backend, and its bad input."""

from __future__ import annotations

import gzip
import json
import sys

import pytest

from database import open_database
from database.dataset_file import FORMAT_VERSION, DatasetFileError, export_dataset, import_dataset, read_dataset
from tuner.cli import app
from tuner.cli.errors import main_guard

FEATURES = "test-features/v1"
CPU = {"model_name": "Test CPU 9000", "llvm_cpu": "testcpu", "cores": 2}


def _fill(db, make, tag: str = "w"):
    """Two workloads, three candidates each (one failed), measured in a collector-like session; one leader confirmed."""
    target = make.target()
    db.add_target(target)
    session = db.start_session({"model": "qwen3-0.6b", "stage": "decode", "cpu": CPU}, "qwen3-0.6b decode", "mh")
    for j, base in enumerate((1e-3, 2e-3)):
        workload = make.workload(f"{tag}{j}")
        db.add_workload(workload)
        candidates = [make.candidate(workload, i) for i in range(3)]
        db.add_candidates(candidates)
        db.add_measure_results([
            make.measure(candidates[0], target, times=(base * 2, base * 2.1), session_id=session),
            make.measure(candidates[1], target, times=(base,), session_id=session),
            make.measure(candidates[2], target, status="build_error", session_id=session),
        ])
        db.add_measure_results([make.measure(candidates[1], target, times=(base * 1.1,), session_id=session,
                                             confirm=True)])
    return target


def test_round_trip_is_idempotent_and_byte_identical(db, db_url, make, tmp_path):
    target = _fill(db, make)
    path = tmp_path / "data" / "dataset.jsonl.gz"
    counts = export_dataset(db, path, FEATURES)
    assert counts == {"targets": 1, "sessions": 1, "workloads": 2, "candidates": 6, "records": 8}
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with open_database(other) as fresh:
        first = import_dataset(fresh, path)
        again = import_dataset(fresh, path)
        assert (first["measure_results"], first["skipped"], first["sessions"]) == (8, 0, 1)
        assert (again["measure_results"], again["skipped"], again["sessions"]) == (0, 8, 0)
        assert fresh.best(make.workload("w0").workload_hash, target.target_hash)[1] == pytest.approx(1.05e-3)
        assert [s["args"]["cpu"] for s in fresh.sessions()] == [CPU]
        export_dataset(fresh, tmp_path / "again.jsonl.gz", FEATURES)
    assert (tmp_path / "again.jsonl.gz").read_bytes() == path.read_bytes()
    assert import_dataset(db, path)["measure_results"] == 0  # back into the database it came from: nothing new


def test_import_keeps_existing_records(db, make, tmp_path):
    _fill(db, make, tag="a")
    path = tmp_path / "a.jsonl.gz"
    export_dataset(db, path, FEATURES)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with open_database(other) as fresh:
        _fill(fresh, make, tag="b")
        assert import_dataset(fresh, path)["measure_results"] == 8
        assert fresh.stats()["measure_result"] == 16
        export_dataset(fresh, path, FEATURES)  # the file grows: it held a's, it now holds a's and b's
    assert len(read_dataset(path)["record"]) == 16


def test_export_refuses_to_shrink_the_file(db, make, tmp_path):
    _fill(db, make)
    path = tmp_path / "d.jsonl.gz"
    export_dataset(db, path, FEATURES)
    before = path.read_bytes()
    with open_database(f"sqlite:///{tmp_path / 'empty.db'}") as empty, pytest.raises(DatasetFileError, match="import"):
        export_dataset(empty, path, FEATURES)
    assert path.read_bytes() == before


def _rewrite(path, edit):
    """Decompress ``path``, apply ``edit`` to its text, compress it back."""
    text = gzip.decompress(path.read_bytes()).decode()
    path.write_bytes(gzip.compress(edit(text).encode()))


def _reheader(text: str, **changes) -> str:
    """``text`` with its header changed and its checksum recomputed over the body as it is now."""
    import hashlib

    head, body = text.split("\n", 1)
    header = {**json.loads(head), "sha256": hashlib.sha256(body.encode()).hexdigest(), **changes}
    return json.dumps(header) + "\n" + body


def _first_record(text: str, **changes) -> str:
    """``text`` with ``changes`` made to its first record line."""
    lines = text.split("\n")
    i = next(i for i, line in enumerate(lines) if '"kind":"record"' in line)
    lines[i] = json.dumps({**json.loads(lines[i]), **changes})
    return "\n".join(lines)


BAD_FILES = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "truncated"),
    "not gzip": (lambda p: p.write_text("hello"), "truncated or not a gzip"),
    "other version": (lambda p: _rewrite(p, lambda t: _reheader(t, version=FORMAT_VERSION + 1)), "format version"),
    "edited": (lambda p: _rewrite(p, lambda t: t.replace('"build_error"', '"ok"', 1)), "checksum"),
    "unknown target": (lambda p: _rewrite(p, lambda t: _reheader(_first_record(t, target_hash="0" * 64))),
                       "unknown target"),
    "count": (lambda p: _rewrite(p, lambda t: _reheader(t.rsplit("\n", 2)[0] + "\n")), "counts"),
}


@pytest.mark.parametrize("bad", sorted(BAD_FILES))
def test_bad_file_is_refused_with_one_line_and_nothing_written(monkeypatch, capsys, make, tmp_path, bad):
    src = f"sqlite:///{tmp_path / 'src.db'}"
    with open_database(src) as db:
        _fill(db, make)
        path = tmp_path / "bad.jsonl.gz"
        export_dataset(db, path, FEATURES)
    spoil, needle = BAD_FILES[bad]
    spoil(path)
    dest = tmp_path / "dest.db"
    for args in (["import", str(path), "--db", f"sqlite:///{dest}"], ["stats", str(path)]):
        monkeypatch.setattr(sys, "argv", ["tune", "dataset", *args])
        with pytest.raises(SystemExit) as done:
            main_guard(app)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert done.value.code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert needle in lines[0] and "Traceback" not in err
    assert not dest.exists()  # a bad file is refused before the database is created


def test_stats_json(monkeypatch, capsys, db, make, tmp_path):
    _fill(db, make)
    path = tmp_path / "d.jsonl.gz"
    export_dataset(db, path, FEATURES)
    monkeypatch.setattr(sys, "argv", ["tune", "dataset", "stats", str(path), "--json"])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    assert done.value.code == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["records"], stats["ok_records"], stats["workloads"], stats["candidates"]) == (8, 6, 2, 6)
    assert stats["cpu"] == {"Test CPU 9000 (testcpu)": 8}
    assert stats["model"] == {"qwen3-0.6b decode": 8}
    assert stats["feature_version"] == FEATURES and stats["format_version"] == FORMAT_VERSION
