"""Why one kernel's search stopped (``KernelOutcome.stop_reason``).

A :class:`enum.StrEnum`: like saturation's reason (``SaturationReport.stop_reason``),
a closed set of names: a member is its string (``SearchStop.BUDGET == "budget"``),
so summaries and JSON output read as before. An interrupted search reports no
reason: it raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SearchStop"]


class SearchStop(StrEnum):
    """Why a kernel's search stopped."""

    #: The workload's trials were all measured.
    BUDGET = "budget"
    #: Every distinct schedule the space gave was measured (or claimed by another session)
    #: before the trials were spent.
    SPACE_EXHAUSTED = "space_exhausted"
    #: Earlier runs already measured the workload's trials: nothing was measured.
    ALREADY_TUNED = "already_tuned"
    #: Other sessions hold the rest of the workload's trials (claims or measurements): it
    #: stopped short of its budget, which they spend.
    BUDGET_TAKEN = "budget_taken"
    #: The run asked for no trials (``trials == 0``): nothing was measured.
    NO_BUDGET = "no_budget"
