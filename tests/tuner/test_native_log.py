"""TVM's native log lines stay off the terminal unless TUNE_DEBUG is set (a command run through main_guard)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each test imports TVM in a fresh process
# A command that makes TVM's C++ code warn on descriptor 2, then fails (as expected, or internally).
_SCRIPT = """
import typer
from tuner.cli.errors import fail, main_guard

app = typer.Typer()

@app.command()
def go(internal: bool = False) -> None:
    from tvm import relax

    bb = relax.BlockBuilder()
    bb._begin_binding_block()
    del bb  # "Warning: BlockBuilder destroyed with remaining blocks!"
    if internal:
        raise RuntimeError("boom")
    fail("bad input")

main_guard(app)
"""

_WARNING = "BlockBuilder destroyed with remaining blocks"


def _run(*args: str, debug: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TUNE_DEBUG"}
    if debug:
        env["TUNE_DEBUG"] = "1"
    return subprocess.run([sys.executable, "-c", _SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_native_warning_kept_off_stderr_and_its_log_named_on_an_internal_error():
    done = _run("--internal")
    lines = done.stderr.splitlines()
    assert done.returncode == 2
    assert len(lines) == 1, done.stderr
    match = re.fullmatch(r"error: internal RuntimeError: boom \(TUNE_DEBUG=1 shows the traceback; "
                         r"TVM's native log: (\S+)\)", lines[0])
    assert match, lines[0]
    try:
        with open(match.group(1)) as log:
            assert _WARNING in log.read()
    finally:
        os.unlink(match.group(1))


def test_native_warning_on_stderr_with_tune_debug():
    done = _run(debug=True)
    assert done.returncode == 1
    assert _WARNING in done.stderr
    assert "error: bad input" in done.stderr
