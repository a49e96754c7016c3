"""Errors as one line on stderr and a non-zero exit, never a traceback (set TUNE_DEBUG=1 for one)."""

from __future__ import annotations

import logging
import os
import re
import sys

import typer

# Error types whose message is meant for the user as it is: (module, class name).
_EXPECTED = (("database", "DatabaseError"), ("extract", "ModelImportError"),
             ("extract.equivalence", "CandidateMismatch"), ("measure", "TrackerError"),
             ("tuner.compile", "VerificationError"), ("tuner.options", "TuneError"))


def expected_errors() -> tuple[type[BaseException], ...]:
    """The error types whose message is meant for the user as it is.

    Only modules already imported are looked in (an error of a module that was
    never imported cannot have been raised), so an early error stays fast.
    """
    found = [getattr(sys.modules[module], name) for module, name in _EXPECTED if module in sys.modules]
    return (*found, ValueError)


# Characters of an error line past which its middle is cut out.
ERROR_LINE_LIMIT = 300
# Lines of a traceback: its header, a Python frame (``File "...", line N``, its source
# lines follow, indented further), a C++ frame as TVM prints them (``0: tvm::...``).
_TRACEBACK_LINE = re.compile(r'(Traceback \(most recent call last\):|File "[^"]*", line \d+|\d+: |\[bt\] )')


def error_line(message: object, limit: int = ERROR_LINE_LIMIT) -> str:
    """The whole of ``message`` as one line of at most ``limit`` characters.

    Lines are joined with spaces; traceback lines (a header, Python frames with their
    source lines, TVM's numbered C++ frames) are dropped; past ``limit`` characters the
    middle is replaced by `` ... `` so that both the start (what failed) and the end
    (the detail) remain.  An empty message reads ``unknown error``.
    """
    kept: list[str] = []
    frame_indent = None  # indentation of the last Python frame line: deeper lines are its source
    for raw in str(message).splitlines():
        line, indent = raw.strip(), len(raw) - len(raw.lstrip())
        if not line or (frame_indent is not None and indent > frame_indent):
            continue
        frame_indent = indent if line.startswith("File ") and _TRACEBACK_LINE.match(line) else None
        if not _TRACEBACK_LINE.match(line):
            kept.append(line)
    text = " ".join(kept) or "unknown error"
    if len(text) <= limit:
        return text
    head = (limit - 5) // 2
    return f"{text[:head].rstrip()} ... {text[len(text) - (limit - 5 - head):].lstrip()}"


class Interrupted(Exception):
    """A command stopped by a signal; its message says what the stopped work kept (exit 130)."""


def fail(message: str, code: int = 1) -> None:
    """Print ``error: message`` (as one line, see :func:`error_line`) and exit with ``code``."""
    typer.echo(f"error: {error_line(message)}", err=True)
    raise typer.Exit(code)


def main_guard(app: typer.Typer) -> None:
    """Run the app; turn every escaping exception into one line and an exit code.

    TVM's native log lines are kept off the terminal (:mod:`tuner.cli.native_log`)
    for the rest of the process, unless ``TUNE_DEBUG`` is set.
    """
    from . import native_log

    logging.getLogger("tvm").setLevel(logging.WARNING)
    native_log.divert()
    try:
        code = app(standalone_mode=False)  # returns the exit code of typer.Exit
        if code == 130:  # typer's word for a KeyboardInterrupt
            _interrupted("")
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except KeyboardInterrupt:
        _interrupted("")
    except Interrupted as err:
        _interrupted(str(err))
    except Exception as err:  # noqa: BLE001 - the last line of defence
        if type(err).__name__ == "Abort":  # typer turns KeyboardInterrupt into Abort
            _interrupted("")
        if os.environ.get("TUNE_DEBUG"):
            raise
        if hasattr(err, "show") and hasattr(err, "exit_code"):  # typer's usage errors
            err.show()
            sys.exit(err.exit_code)
        if isinstance(err, expected_errors()):
            typer.echo(f"error: {_one_line(err)}", err=True)
            sys.exit(1)
        log = native_log.save_tail()
        where = f"; TVM's native log: {log}" if log else ""
        typer.echo(f"error: internal {type(err).__name__}: {_one_line(err)} (TUNE_DEBUG=1 shows the traceback{where})",
                   err=True)
        sys.exit(2)


def _interrupted(kept: str) -> None:
    """Exit 130 saying ``interrupted``, and what was kept where the stopped command says (``tune run`` does)."""
    typer.echo(f"interrupted: {kept}" if kept else "interrupted", err=True)
    sys.exit(130)


def _one_line(err: BaseException) -> str:
    return error_line(err) if str(err).strip() else type(err).__name__
