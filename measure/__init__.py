"""Measurement: builders, runners over TVM RPC, the protocol and local trackers/workers.

Importing the package sets the threads of TVM's runtime to this process's physical
cores (:mod:`measure.threads`), before any kernel runs.
"""

from .builder import Builder, BuildResult
from .protocol import MeasureConfig, classify_build_error, first_line
from .rpc import (
    DEFAULT_TRACKER_PORT,
    LOCAL_KEY,
    LocalRPC,
    TrackerAddress,
    TrackerError,
    parse_tracker,
    queue_status,
    tracker_from_env,
    wait_for_key,
    workers_for_key,
)
from .runner import KernelReference, Runner, RunResult
from .threads import use_physical_cores

use_physical_cores()

__all__ = [
    "DEFAULT_TRACKER_PORT",
    "LOCAL_KEY",
    "BuildResult",
    "Builder",
    "KernelReference",
    "LocalRPC",
    "MeasureConfig",
    "RunResult",
    "Runner",
    "TrackerAddress",
    "TrackerError",
    "classify_build_error",
    "first_line",
    "parse_tracker",
    "queue_status",
    "tracker_from_env",
    "wait_for_key",
    "workers_for_key",
]
