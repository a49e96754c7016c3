"""Errors as one line on stderr and a non-zero exit, never a traceback (set TUNE_DEBUG=1 for one)."""

from __future__ import annotations

import logging
import os
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


class Interrupted(Exception):
    """A command stopped by a signal; its message says what the stopped work kept (exit 130)."""


def fail(message: str, code: int = 1) -> None:
    """Print ``error: message`` (first line only) and exit with ``code``."""
    line = str(message).strip().splitlines()[0] if str(message).strip() else "unknown error"
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code)


def main_guard(app: typer.Typer) -> None:
    """Run the app; turn every escaping exception into one line and an exit code."""
    logging.getLogger("tvm").setLevel(logging.WARNING)
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
        typer.echo(f"error: internal {type(err).__name__}: {_one_line(err)} (TUNE_DEBUG=1 shows the traceback)",
                   err=True)
        sys.exit(2)


def _interrupted(kept: str) -> None:
    """Exit 130 saying ``interrupted``, and what was kept where the stopped command says (``tune run`` does)."""
    typer.echo(f"interrupted: {kept}" if kept else "interrupted", err=True)
    sys.exit(130)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
