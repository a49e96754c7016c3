"""Models recorded by content hash and the path as given; ``tune db best --model`` by path, name or hash."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from database import GraphCandidateRecord
from extract.frontend import CONFIG_DIR, check_model, file_hash
from extract.imported import stable_hash
from tuner.cli import app
from tuner.model_ref import ModelLookupError, record_session, resolve_model
from tuner.options import RunOptions
from tuner.session import session_arguments

runner = CliRunner()


def _write_configs(root):
    """Two different configs, both named config.json, in a/ and b/."""
    data = json.loads((CONFIG_DIR / "qwen3-tiny.json").read_text())
    paths = []
    for folder, size in (("a", 96), ("b", 256)):  # neither is the shipped qwen3-tiny (128)
        (root / folder).mkdir()
        path = root / folder / "config.json"
        path.write_text(json.dumps({**data, "intermediate_size": size}))
        paths.append(path)
    return paths


def _record(db, make, given: str, tag: str):
    """A session of the model ``given`` recorded as ``tune run`` records it, and one workload of it."""
    source = check_model(given)
    model = SimpleNamespace(source=f"{source.label} prefill seq_len=128 layers=1",
                            model_hash=stable_hash("qwen3", source.config, "prefill"))  # as the import names it
    session = record_session(db, session_arguments(RunOptions(model=given)), source, model)
    workload = make.workload(tag)
    db.add_workload(workload)
    db.add_graph_candidate(GraphCandidateRecord(model.model_hash, "(term)", (workload.workload_hash,)))
    candidate = make.candidate(workload, 0)
    db.add_candidates([candidate])
    target = make.target()
    db.add_target(target)
    db.add_measure_results([make.measure(candidate, target, session_id=session)])
    return model, workload


@pytest.fixture
def two_configs(db, make, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = _write_configs(tmp_path)
    model_a, w_a = _record(db, make, "a/config.json", "wa")
    model_b, w_b = _record(db, make, "b/config.json", "wb")
    builtin, w_builtin = _record(db, make, "qwen3-tiny", "wq")
    return SimpleNamespace(paths=(a, b), models=(model_a, model_b, builtin), workloads=(w_a, w_b, w_builtin))


def test_two_configs_of_one_name_are_two_models(db, two_configs):
    models = db.recorded_models()
    by_given = {m.given: m for m in models}
    a, b = by_given["a/config.json"], by_given["b/config.json"]
    assert a.content_hash == file_hash(two_configs.paths[0]) != b.content_hash == file_hash(two_configs.paths[1])
    assert a.model_hash != b.model_hash
    assert a.source.startswith("a/config.json ") and b.source.startswith("b/config.json ")


def test_resolve_by_path_in_any_spelling_name_and_hash(db, two_configs, tmp_path):
    models = db.recorded_models()
    model_a, model_b, builtin = (m.model_hash for m in two_configs.models)
    content_a = file_hash(two_configs.paths[0])
    for spelling in ("a/config.json", "./a/config.json", str(tmp_path / "a" / "config.json"),
                     os.path.join("..", tmp_path.name, "a", "config.json"), model_a, model_a[:8], content_a[:10],
                     "a/config.json prefill seq_len=128 layers=1"):
        assert resolve_model(models, spelling) == {model_a}, spelling
    assert resolve_model(models, "b/config.json") == {model_b}
    for name in ("qwen3-tiny", "Qwen/Qwen3-Tiny", str(CONFIG_DIR / "qwen3-tiny.json")):
        assert resolve_model(models, name) == {builtin}, name


def test_resolve_errors_name_the_candidates(db, two_configs):
    models = db.recorded_models()
    with pytest.raises(ModelLookupError, match=r"no model matches --model c/config.json; known models: "
                                               r"a/config.json \(.*b/config.json \(.*qwen3-tiny \("):
        resolve_model(models, "c/config.json")
    with pytest.raises(ModelLookupError, match="at least 8 hex digits"):
        resolve_model(models, "abc")
    recorded = type(models[0])
    fake = [*models, recorded("x prefill", "0" * 8 + "1" * 56), recorded("y prefill", "0" * 8 + "2" * 56)]
    with pytest.raises(ModelLookupError, match=r"--model 00000000 is ambiguous: it begins "
                                               r"0000000011111111 \(x prefill\), 0000000022222222 \(y prefill\)"):
        resolve_model(fake, "00000000")
    assert resolve_model(fake, "000000001") == {"0" * 8 + "1" * 56}


def test_best_by_each_spelling(db_url, two_configs, tmp_path):
    w_a, w_b, w_builtin = (w.workload_hash for w in two_configs.workloads)
    model_a = two_configs.models[0].model_hash
    for spelling, expected in (("a/config.json", w_a), (str(tmp_path / "b" / "config.json"), w_b),
                               ("./b/config.json", w_b), ("qwen3-tiny", w_builtin), (model_a[:8], w_a)):
        result = runner.invoke(app, ["db", "best", "--db", db_url, "--json", "--model", spelling])
        assert result.exit_code == 0, result.output
        assert [r["workload_hash"] for r in json.loads(result.output)["best"]] == [expected], spelling


def test_best_of_an_unknown_model_lists_the_known_ones(db_url, two_configs):
    result = runner.invoke(app, ["db", "best", "--db", db_url, "--model", "no-such-model"])
    assert result.exit_code == 1
    assert "no model matches --model no-such-model; known models: a/config.json (" in result.output
    assert "Traceback" not in result.output
