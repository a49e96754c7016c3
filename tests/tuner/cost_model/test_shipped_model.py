"""The shipped pretrained cost model: trained from a data set file, used where a database has none of its own."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from database import open_database
from database.dataset_file import dataset_stats
from tuner.cli import app
from tuner.cli.errors import main_guard
from tuner.cost_model.node_prices import node_kernel
from tuner.cost_model.shipped import PretrainedModelError, load_shipped, pretrain
from tuner.cost_model.store import save_model, starting_model
from tuner.cost_model.xgb import FEATURE_VERSION, XGBCostModel
from tuner.search.search import ModelTrainer
from tuner.space.space import ScheduleSpace
from tuner.target import resolve_target

TARGET = resolve_target('{"kind": "llvm", "num-cores": 2}')


@pytest.fixture(scope="module")
def dataset_file(synthetic_dataset):
    return synthetic_dataset.path


@pytest.fixture(scope="module")
def shipped(dataset_file, tmp_path_factory):
    """The model pretrained from ``dataset_file`` and its info."""
    out = tmp_path_factory.mktemp("model") / "model.json.gz"
    return out, pretrain(dataset_file, out)


def test_pretrain_writes_a_versioned_model_of_every_record(shipped, dataset_file):
    out, info = shipped
    assert info["feature_version"] == FEATURE_VERSION and info["target_kinds"] == ["llvm"]
    assert info["records"] == dataset_stats(dataset_file)["candidates"] > 3 and info["skipped"] == 0
    loaded = load_shipped(out)
    assert loaded.info == info and info["workloads"] == 3
    assert sum(info["cpu"].values()) == info["records"] and sorted(info["cpu"]) == ["CPU A (a)", "CPU B (b)"]
    kernel = node_kernel("matmul", (8, 32), "float32", [(8, 16), (16, 32)])
    space = ScheduleSpace(kernel.func, kernel.workload.workload_hash, TARGET.target, seed=1)
    X = space.feature_matrix(space.sample(3), kernel.workload)
    assert np.all(np.isfinite(loaded.model.predict_latency(X)))


def test_run_starts_from_the_shipped_model_until_the_database_has_its_own(shipped, tmp_path):
    out, _ = shipped
    notes = []
    with open_database(f"sqlite:///{tmp_path / 'tune.db'}") as db:
        db.add_target(TARGET.record)
        model = starting_model(db, TARGET.target_hash, "llvm", notes.append, shipped_path=out)
        assert model is not None and model.save() == load_shipped(out).model.save()
        assert "shipped pretrained model" in notes[-1] and "no model of its own" in notes[-1]
        assert starting_model(db, TARGET.target_hash, "cuda", notes.append, shipped_path=out) is None
        trainer = ModelTrainer(model)
        rng = np.random.default_rng(0)
        trainer.model = XGBCostModel(n_estimators=5).fit(rng.random((8, model.score_booster_.num_features())),
                                                          rng.random(8) + 0.1)
        save_model(db, TARGET.target_hash, trainer)
        own = starting_model(db, TARGET.target_hash, "llvm", notes.append, shipped_path=out)
        assert own.save() == trainer.model.save() and notes[-1] == "cost model: warm start from the database"


def _rewrite(path, dest, edit):
    data = json.loads(gzip.decompress(path.read_bytes()))
    dest.write_bytes(gzip.compress(json.dumps(edit(data)).encode()))
    return dest


def test_a_shipped_model_of_another_feature_version_is_refused_and_not_used(shipped, tmp_path):
    out, _ = shipped
    other = _rewrite(out, tmp_path / "other.json.gz", lambda d: {**d, "info": {**d["info"], "feature_version": "v0"}})
    with pytest.raises(PretrainedModelError, match="feature version 'v0'"):
        load_shipped(other)
    notes = []
    with open_database(f"sqlite:///{tmp_path / 'tune.db'}") as db:
        db.add_target(TARGET.record)
        assert starting_model(db, TARGET.target_hash, "llvm", notes.append, shipped_path=other) is None
    assert "not used" in notes[-1] and "tune model pretrain" in notes[-1]


def test_an_unreadable_shipped_model_is_refused(shipped, tmp_path):
    out, _ = shipped
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(out.read_bytes()[:100])
    with pytest.raises(PretrainedModelError, match="unreadable"):
        load_shipped(broken)
    assert load_shipped(tmp_path / "absent.json.gz") is None


def test_pretrain_command(monkeypatch, capsys, dataset_file, tmp_path):
    out = tmp_path / "cli.json.gz"
    monkeypatch.setattr(sys, "argv", ["tune", "model", "pretrain", str(dataset_file), "--out", str(out), "--json"])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    assert done.value.code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["out"] == str(out) and load_shipped(out).info["records"] == info["records"]
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(dataset_file.read_bytes()[:50])
    monkeypatch.setattr(sys, "argv", ["tune", "model", "pretrain", str(bad), "--out", str(tmp_path / "x.gz")])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    err = capsys.readouterr().err
    assert done.value.code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.gz").exists()


def test_tune_pretrained_names_another_model_or_none(shipped, tmp_path, monkeypatch):
    out, _ = shipped
    with open_database(f"sqlite:///{tmp_path / 'tune.db'}") as db:
        db.add_target(TARGET.record)
        monkeypatch.setenv("TUNE_PRETRAINED", "off")
        assert starting_model(db, TARGET.target_hash, "llvm", lambda _m: None) is None
        monkeypatch.setenv("TUNE_PRETRAINED", str(out))
        assert starting_model(db, TARGET.target_hash, "llvm", lambda _m: None).save() == load_shipped(out).model.save()


@pytest.mark.slow
def test_tune_run_says_it_starts_from_the_shipped_model_and_stores_no_copy(shipped, tmp_path):
    out, _ = shipped
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "qwen3-tiny", "--stage", "decode", "--kv-len", "16", "--trials", "0",
         "--candidates", "1", "--measure-top", "1", "--db", f"sqlite:///{tmp_path / 'tune.db'}", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1200, env={**os.environ, "TUNE_PRETRAINED": str(out)})
    assert proc.returncode == 0, proc.stderr
    assert "starting from the shipped pretrained model" in proc.stderr
    summary = json.loads(proc.stdout)
    assert "predicted" in {k["source"] for k in summary["kernels"]}  # priced by the shipped model, not the roofline
    with open_database(f"sqlite:///{tmp_path / 'tune.db'}") as db:
        assert db.cost_model_versions() == []  # nothing measured, nothing trained: the shipped model is not copied
