"""Every command's error is one line holding the whole message (tuner.cli.errors)."""

from __future__ import annotations

import pytest
import typer

from tuner.cli.errors import error_line, fail

TVM_ERROR = """Traceback (most recent call last):
  File "/site-packages/tvm/relax/block_builder.py", line 673, in normalize
    return _ffi_api.BlockBuilderNormalize(self, expr)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  1: tvm::relax::BlockBuilderImpl::Normalize(tvm::RelaxExpr const&)
  0: tvm::relax::InferTypeBroadcastTo(tvm::relax::Call const&, tvm::relax::BlockBuilder const&)
ValueError: Mismatched s.ndim on argument #1 when calling:
  `multiply(lv: Tensor([1, 16, 64], float32), s: Tensor([], float32))`,
  expected 0
"""


def test_a_multi_line_tvm_error_is_one_whole_line_without_its_traceback():
    line = error_line(TVM_ERROR)
    assert line == (
        "ValueError: Mismatched s.ndim on argument #1 when calling: "
        "`multiply(lv: Tensor([1, 16, 64], float32), s: Tensor([], float32))`, expected 0"
    )


def test_a_long_message_keeps_its_start_and_end():
    line = error_line("start " + "x" * 2000 + " end", limit=100)
    assert len(line) <= 100 and line.startswith("start x") and line.endswith("x end") and " ... " in line
    assert error_line("  \n ") == "unknown error"


def test_fail_prints_the_joined_message(capsys):
    with pytest.raises(typer.Exit) as done:
        fail("cannot open the database:\n  no such file")
    assert done.value.exit_code == 1
    assert capsys.readouterr().err == "error: cannot open the database: no such file\n"
