"""What a `tune run` session stores and says, from its options and counts (no tuning)."""

from __future__ import annotations

import sys

import pytest

from tuner.cli import app
from tuner.cli.errors import main_guard
from tuner.options import RunOptions
from tuner.session import RunInterrupted, TuneRun, session_arguments, stop_summary


def test_stored_arguments_mask_every_credential_of_the_url():
    url = "postgresql+psycopg://u:USERPW@h/db?password=SECRETPW&sslpassword=KEYPW&application_name=tune"
    stored = session_arguments(RunOptions(model="qwen3-tiny", db=url))
    assert not any(secret in str(stored) for secret in ("USERPW", "SECRETPW", "KEYPW"))
    assert stored["db"].startswith("postgresql+psycopg://u:***@h/db?") and "application_name=tune" in stored["db"]
    assert session_arguments(RunOptions(model="qwen3-tiny"))["db"] is None


def test_the_stop_summary_gives_the_counts():
    assert stop_summary(0, 0, 0) == "nothing was measured in this session; no claim left to release"
    assert stop_summary(0, 0, 8) == "nothing was measured in this session; 8 claims released for other runs"
    assert stop_summary(1, 0, 1) == ("1 trial measured and kept in this session (failures included); "
                                     "1 claim released for other runs")
    assert stop_summary(12, 3, 0) == ("12 trials measured and kept in this session (failures included), "
                                      "3 re-measurements of leaders; no claim left to release")


def test_an_interrupted_run_says_its_counts_on_one_line(monkeypatch, capsys):
    def stopped(self):
        raise RunInterrupted(stop_summary(5, 0, 3))

    monkeypatch.setattr(TuneRun, "run", stopped)
    monkeypatch.setattr(sys, "argv", ["tune", "run", "qwen3-tiny", "-q"])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    assert done.value.code == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == ["interrupted: 5 trials measured and kept in this session (failures included); "
                     "3 claims released for other runs"]
    assert "every result recorded" not in " ".join(lines)


def test_a_config_dtype_other_than_float32_is_noted():
    from extract.config import dtype_note
    from extract.frontend import check_model

    note = dtype_note(check_model("qwen3-0.6b").config)  # its config.json says bfloat16
    assert note and "bfloat16" in note and "float32" in note
    assert dtype_note({"torch_dtype": "float32"}) is None and dtype_note({}) is None
