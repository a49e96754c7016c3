"""Plain, frozen records that cross package borders.

Every record is a frozen dataclass with a canonical JSON form and, where it is a
keyed entity, a SHA-256 key over that form. No ORM object or TVM object crosses
a package border; the database stores these records and gives them back.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field

from .status import MeasureStatus


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value) -> str:
    """JSON with sorted keys and no whitespace: the form every hash is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TargetRecord:
    """A compilation target and the RPC key naming a pool of identical devices.

    Parameters
    ----------
    target_json : str
        Canonical JSON of ``tvm.target.Target.export()``.
    key : str
        The RPC key of the device pool the measurements ran on.
    """

    target_json: str
    key: str

    @property
    def target_hash(self) -> str:
        """SHA-256 over the canonical target JSON and the key."""
        return sha256_text(self.target_json + "\n" + self.key)


@dataclass(frozen=True)
class WorkloadRecord:
    """One kernel (a TIR PrimFunc) identified by its structural hash.

    Parameters
    ----------
    workload_hash : str
        Hex of TVM's structural hash of the PrimFunc (with its name dropped),
        so the same kernel from two models is one workload.
    name : str
        A readable name (the fused function's name in the first model it came from).
    op_kind : str
        A coarse kind: ``matmul``, ``attention``, ``reduction``, ``elementwise`` or ``other``.
    script : str
        Canonical TVMScript of the PrimFunc; parseable back with ``tvm.script.from_source``.
    shapes_json : str
        JSON list of ``{"shape": [...], "dtype": str}`` per buffer argument, in order.
    flops : float
        Floating-point operations of one call (multiply-add counts 2), from
        TVM's ``estimate_tir_flops``.
    bytes_moved : float
        Bytes of all buffer arguments (each read or written once): a lower bound on traffic.
    """

    workload_hash: str
    name: str
    op_kind: str
    script: str
    shapes_json: str
    flops: float
    bytes_moved: float


@dataclass(frozen=True)
class CandidateRecord:
    """A schedule of a workload: a serialized ``s_tir`` trace.

    ``trace_json`` is the canonical JSON of ``Trace.as_json(remove_postproc=True)``;
    the untuned default schedule is the empty trace ``[[], []]``.
    """

    workload_hash: str
    trace_json: str

    @property
    def candidate_hash(self) -> str:
        """SHA-256 over the workload hash and the trace JSON."""
        return sha256_text(self.workload_hash + "\n" + self.trace_json)

    @property
    def is_default(self) -> bool:
        """True for the untuned default schedule (the empty trace)."""
        return self.trace_json == DEFAULT_TRACE_JSON


DEFAULT_TRACE_JSON = canonical_json([[], []])


@dataclass(frozen=True)
class MeasureRecord:
    """One measurement of a candidate on a target and device key.

    Parameters
    ----------
    candidate_hash, workload_hash, target_hash : str
        What was measured, where.
    status : MeasureStatus
        How the measurement ended; its string (``"ok"``, ...) is accepted and
        turned into the member. ``ValueError`` for any other string.
    times_s : tuple of float
        Raw repeat times in seconds (each the mean over ``number`` runs); empty on failure.
    build_time_s : float
        Seconds spent building the candidate (0 when unknown).
    error : str
        The failure message; empty when ``status`` is ``MeasureStatus.OK``.
    worker : str
        The RPC key and worker the measurement ran on.
    session_id : int or None
        The tuning session that measured it.
    confirm : bool
        A re-measurement of a measured candidate (its kernel's leaders confirmed,
        ``tuner.search.confirm``), not a trial: the search's budget does not count it.
    """

    candidate_hash: str
    workload_hash: str
    target_hash: str
    status: MeasureStatus
    times_s: tuple[float, ...] = ()
    build_time_s: float = 0.0
    error: str = ""
    worker: str = ""
    session_id: int | None = None
    confirm: bool = False

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", MeasureStatus(self.status))
        except ValueError:
            raise ValueError(f"unknown measure status {self.status!r}") from None

    @property
    def median_s(self) -> float | None:
        """Median of the repeat times in seconds, or None when there are none."""
        return statistics.median(self.times_s) if self.times_s else None


def candidate_latency(medians: list[float]) -> float:
    """A candidate's latency in seconds from the medians of its ``ok`` measurements: their median.

    One measurement is its own median. With the leaders re-measured
    (``tuner.search.confirm``), the median over three measurements taken at
    different moments discards a lucky or unlucky one (on a shared machine the
    same program measured seconds apart can differ by tens of percent; see
    docs/decisions.md, "Confirming the leaders, within 1.25x of the fastest").
    """
    return statistics.median(medians)


@dataclass(frozen=True)
class TrainingRow:
    """One measured candidate as the cost model and the choice of kernels see it.

    ``median_s`` is its latency in seconds: the median over the medians of its
    ``ok`` measurements on a target (:func:`candidate_latency`),
    ``measurements`` how many there are.
    """

    workload_hash: str
    candidate_hash: str
    trace_json: str
    median_s: float
    measurements: int = 1


@dataclass(frozen=True)
class GraphCandidateRecord:
    """An extracted program of a model: its term text, kernels and latencies (seconds)."""

    model_hash: str
    term_text: str
    workload_hashes: tuple[str, ...] = field(default_factory=tuple)
    predicted_latency_s: float | None = None
    measured_latency_s: float | None = None

    @property
    def graph_hash(self) -> str:
        """SHA-256 over the model hash and the term text."""
        return sha256_text(self.model_hash + "\n" + self.term_text)


@dataclass(frozen=True)
class ProgramTimingRecord:
    """An end-to-end timing of a reference program (``program``, e.g. ``tvm_default``) of a
    model (``model_hash``) on a target: its repeat times in seconds and the session that took it."""

    model_hash: str
    target_hash: str
    program: str
    times_s: tuple[float, ...]
    session_id: int | None = None

    @property
    def median_s(self) -> float:
        """Median of the repeat times (seconds)."""
        return statistics.median(self.times_s)
