"""Bad input to `tune run`: one line on stderr, a non-zero exit, no traceback, nothing lost."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from extract.frontend import CONFIG_DIR

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


def tune(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["no-such-model"], ["no-such-model", "qwen3-0.6b"]),
        (["missing.onnx"], ["missing.onnx"]),
        (["qwen3-tiny", "--trials", "-1"], ["--trials"]),
        (["qwen3-tiny", "--seq-len", "0"], ["--seq-len", "got 0"]),
        (["qwen3-tiny", "--stage", "train"], ["train"]),
        (["qwen3-tiny", "--tracker", "127.0.0.1:notaport"], ["127.0.0.1:notaport"]),
        (["qwen3-tiny", "--tracker", "127.0.0.1:1"], ["127.0.0.1:1"]),
        (["qwen3-tiny", "--target", '{"kind": "no-such-kind"}'], ["no-such-kind"]),
        (["qwen3-tiny", "--weights-dtype", "fp8"], ["unsupported --weights-dtype 'fp8'", "int4"]),
        (["qwen3-tiny", "--weights-dtype", "int8", "--group-size", "32"], ["--group-size", "int4 only"]),
        (["qwen3-tiny", "--group-size", "32"], ["--group-size", "int4 only", "float32"]),
        (["qwen3-tiny", "--weights-dtype", "int4", "--group-size", "64"], ["--group-size must be one of 32, 128"]),
        (["qwen3-tiny", "--whole-model", "--weights-dtype", "int8"], ["--weights-dtype", "--whole-model"]),
    ],
    ids=["unknown-model", "missing-onnx", "negative-trials", "zero-seq-len", "bad-stage", "malformed-tracker",
         "unreachable-tracker", "bad-target", "weights-dtype", "group-size-int8", "group-size-float32",
         "group-size-64", "weights-dtype-whole-model"],
)
def test_bad_input_is_one_line(tmp_path, args, needles):
    proc = tune("run", *args, "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, *needles)


def test_malformed_onnx_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"this is not a protobuf")
    proc = tune("run", "bad.onnx", "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "bad.onnx")


def test_a_group_size_that_does_not_divide_k_creates_no_database(tmp_path):
    proc = tune("run", "qwen3-tiny", "-q", "--weights-dtype", "int4", "--group-size", "128", "--db",
                f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "--group-size 128 does not divide K=64")
    assert not (tmp_path / "t.db").exists()


def test_quantized_weights_need_a_config_model(tmp_path, mlp_onnx):
    proc = tune("run", str(mlp_onnx), "-q", "--weights-dtype", "int8", "--db", f"sqlite:///{tmp_path}/t.db",
                cwd=tmp_path)
    assert_one_line_error(proc, "--weights-dtype int8 needs a config model")


def test_unwritable_database_path(tmp_path):
    (tmp_path / "file").write_text("a file, not a directory")
    proc = tune("run", "qwen3-tiny", "-q", "--db", f"sqlite:///{tmp_path}/file/t.db", cwd=tmp_path)
    assert_one_line_error(proc)


def test_database_is_checked_before_the_model_import(tmp_path):
    """A bad --db is reported before the (slow) model import: here the import would fail too."""
    config = json.loads((CONFIG_DIR / "qwen3-tiny.json").read_text())
    (tmp_path / "bad_act.json").write_text(json.dumps({**config, "hidden_act": "nope"}))  # fails only when built
    (tmp_path / "file").write_text("a file, not a directory")
    proc = tune("run", "bad_act.json", "-q", "--db", f"sqlite:///{tmp_path}/file/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "--db: ", "t.db")
    proc = tune("run", "bad_act.json", "-q", "--db", "not a url", cwd=tmp_path)
    assert_one_line_error(proc, "--db: malformed database URL")
    proc = tune("run", "bad_act.json", "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "bad qwen3 config", "KeyError: 'nope'")


def test_a_bad_model_creates_no_database(tmp_path):
    """The model name, stage and config are checked before the database is opened: a typo creates nothing."""
    for args in (["qwen3-tinyy"], ["qwen3-tiny", "--layers", "5"], ["missing.json"]):
        proc = tune("run", *args, "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
        assert_one_line_error(proc)
        assert not (tmp_path / "t.db").exists(), args


def test_another_applications_sqlite_file_is_refused_unchanged(tmp_path):
    """tune run never writes its tables into a SQLite file that holds other tables."""
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("create table foo (x int)")
    con.commit()
    con.close()
    before = db.read_bytes()
    proc = tune("run", "qwen3-tiny", "-q", "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert_one_line_error(proc, "is not a tuning database", "foo")
    assert db.read_bytes() == before


def test_recorded_results_survive_a_failed_run(tmp_path):
    """A run that fails (here: an unreachable tracker) leaves an existing database as it was."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("create table keep (x int)")
    con.execute("insert into keep values (42)")
    con.commit()
    con.close()
    proc = tune("run", "qwen3-tiny", "-q", "--tracker", "127.0.0.1:1", "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert proc.returncode != 0
    assert sqlite3.connect(db).execute("select x from keep").fetchall() == [(42,)]


def test_every_candidate_failing_names_the_workload(tmp_path):
    """Builds that all time out: a one-line error naming the workload, a failed session, every failure kept."""
    proc = tune("run", "qwen3-tiny", "--seq-len", "8", "--trials", "1", "--candidates", "1", "--timeout", "0.01",
                "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "every candidate of workload", "timeout")
    con = sqlite3.connect(tmp_path / "t.db")
    assert con.execute("select status from session").fetchall() == [("failed",)]
    statuses = con.execute("select status from measure_result").fetchall()
    assert statuses and all(s == ("timeout",) for s in statuses)
    # a rerun with a larger budget resumes over the failed candidates (the session reads their traces back,
    # tuner.search.search.resume_state) and fails alike, measuring none of them again
    proc = tune("run", "qwen3-tiny", "--seq-len", "8", "--trials", "2", "--candidates", "1", "--timeout", "0.01",
                "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "every candidate of workload", "timeout")
    assert con.execute("select status from session").fetchall() == [("failed",), ("failed",)]
    again = con.execute("select c.candidate_hash, count(*) from measure_result m join candidate c "
                        "on c.id = m.candidate_id group by c.id").fetchall()
    assert len(again) > len(statuses) and all(n == 1 for _, n in again)


def test_batch_size_must_be_positive(tmp_path):
    proc = tune("run", "qwen3-tiny", "--batch-size", "0", "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, "--batch-size")



def test_bad_options_are_refused_before_tvm_and_torch_load():
    """The option checks import nothing heavy, so `tune run --trials -1` answers at once."""
    code = ("import sys\nfrom tuner.options import RunOptions, TuneError\n"
            "try:\n    RunOptions(model='qwen3-tiny', trials=-1)\nexcept TuneError as err:\n    print(err)\n"
            "print(sorted(m for m in ('tvm', 'torch', 'transformers', 'database') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.splitlines() == ["--trials must be non-negative (0 measures nothing), got -1", "[]"]


@pytest.mark.parametrize(
    "target, needles",
    [
        ('{"kind": "llvm", "mcpu": "nosuchcpu"}', ["'mcpu'", "nosuchcpu"]),
        ('{"kind": "llvm", "num-cores": 0}', ["'num-cores'", "got 0"]),
        ('{"kind": "llvm", "num-cores": -2}', ["'num-cores'", "got -2"]),
        ('{"kind": "llvm", "cores": 2}', ["'cores'", "value 2"]),
    ],
    ids=["unknown-mcpu", "zero-cores", "negative-cores", "unknown-key"],
)
def test_an_invalid_target_is_refused_before_anything_is_opened(tmp_path, target, needles):
    started = time.monotonic()
    proc = tune("run", "qwen3-tiny", "-q", "--target", target, "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert_one_line_error(proc, *needles)
    assert time.monotonic() - started < 60  # the TVM import alone; no model import, no measurement
    assert not (tmp_path / "t.db").exists()
    assert "nosuchcpu" not in proc.stdout


def test_model_eval_refuses_an_invalid_target(tmp_path):
    from database import open_database

    open_database(f"sqlite:///{tmp_path}/t.db").close()
    for target, needle in (('{"kind": "llvm", "mcpu": "nosuchcpu"}', "nosuchcpu"),
                           ('{"kind": "llvm", "num-cores": 0}', "'num-cores'")):
        proc = tune("model", "eval", "--target", target, "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
        assert_one_line_error(proc, needle)
        assert "no measurements" not in proc.stderr
