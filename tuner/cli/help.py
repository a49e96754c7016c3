"""How ``tune``'s help looks: ``-h`` beside ``--help``, ``--version``, no value shown for a flag."""

from __future__ import annotations

from importlib import metadata

import typer
from typer.core import TyperOption

#: the help options of every command (sub-commands inherit their parent's)
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def version() -> str:
    """The installed ``tune`` distribution's version, or ``unknown`` when it is not installed."""
    try:
        return metadata.version("tune")
    except metadata.PackageNotFoundError:
        return "unknown"


def print_version(value: bool) -> None:
    """The ``--version`` callback: print ``tune VERSION`` and exit."""
    if value:
        typer.echo(f"tune {version()}")
        raise typer.Exit()


def show_no_type_for_flags() -> None:
    """Show no type for a flag in the rich help.

    typer's rich help shows ``<bool>`` beside ``--json`` or ``--help`` as if they
    took a value; its plain help does not. A flag's type cell is left empty.
    """
    if getattr(TyperOption.display_type_rich, "_tune_flags", False):
        return
    shown = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        if self.is_flag and self.metavar is None:
            return None
        return shown(self, ctx)

    display_type_rich._tune_flags = True
    TyperOption.display_type_rich = display_type_rich
