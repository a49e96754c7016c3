"""The ``tune`` command line (typer): one module per command group."""

from __future__ import annotations

from typing import Annotated

import typer

from .dataset import dataset_app
from .db import db_app
from .errors import main_guard
from .generate import generate_command
from .help import CONTEXT_SETTINGS, print_version, show_no_type_for_flags
from .model import model_app
from .report import report_command
from .rpc import tracker_command, worker_command, workers_command
from .run import run_command
from .simulate import simulate_command

show_no_type_for_flags()
# Local variables in a traceback would print database passwords.
app = typer.Typer(
    name="tune",
    help="A learned-cost-model autotuner for LLM tensor programs.",
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
    add_completion=False,
    context_settings=CONTEXT_SETTINGS,
)
app.command("run")(run_command)
app.command("generate")(generate_command)
app.command("report")(report_command)
app.command("simulate")(simulate_command)
app.command("tracker")(tracker_command)
app.command("worker")(worker_command)
app.command("workers")(workers_command)
app.add_typer(db_app, name="db")
app.add_typer(model_app, name="model")
app.add_typer(dataset_app, name="dataset")


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True,
                                          callback=print_version)] = False,
) -> None:
    """Tune LLM tensor programs with an e-graph, TVM schedules and a learned cost model."""


def main() -> None:
    """Console-script entry point."""
    main_guard(app)
