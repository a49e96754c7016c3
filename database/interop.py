"""TVM MetaSchedule's JSON database in and out (``tune db import`` / ``tune db export``).

A MetaSchedule database is a directory with ``database_workload.json`` (one
IRModule per line) and ``database_tuning_record.json`` (one tuning record per
line: workload index, trace, run seconds, target, argument info). Both are read
and written with TVM's own ``JSONDatabase``; nothing is hand-parsed.

Mapping: a MetaSchedule workload's ``main`` PrimFunc is our workload (keyed by
its structural hash, as the tuner keys kernels, and of the op kind its blocks
show, ``measure.tvmapi.op_kind``, as the tuner files them); its trace is a candidate; each
tuning record is one measurement on the record's target with the RPC key given
to the import. Run seconds of 1e9 or more (MetaSchedule's mark of a failed run)
or none at all become a ``run_error``; a failed measurement is exported with
MetaSchedule's ``[1e10]``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .records import CandidateRecord, MeasureRecord, TargetRecord, WorkloadRecord
from .session import DatabaseError
from .status import MeasureStatus

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
FAILED_RUN_S = 1e10  # what MetaSchedule records as the run time of a failed candidate
_FAILED_AT_S = 1e9


def import_metaschedule(db, directory: str | Path, key: str) -> dict[str, int]:
    """Import a MetaSchedule JSON database into ``db`` in one transaction.

    Parameters
    ----------
    db : database.Database
        The destination.
    directory : str or Path
        A directory holding ``database_workload.json`` and ``database_tuning_record.json``.
    key : str
        The RPC key to file the measurements under (MetaSchedule records none).

    Returns
    -------
    dict
        Counts: ``workloads``, ``records``, ``measure_results`` (added), ``skipped``
        (already present: importing twice adds nothing).

    Raises
    ------
    DatabaseError
        When a file is missing or unreadable, or any record is corrupt: nothing
        is written then.
    """
    tuning_records = _read(Path(directory))
    from measure.tvmapi import (
        estimate_flops,
        kernel_hash,
        op_kind,
        target_json,
        trace_to_json,
    )

    targets, workloads, candidates, results = {}, {}, {}, []
    for record in tuning_records:
        func = record.workload.mod["main"]
        wh = kernel_hash(func)
        if wh not in workloads:
            workloads[wh] = _workload_record(func, wh, estimate_flops(func), op_kind(func))
        target = TargetRecord(target_json(record.target), key)
        targets[target.target_hash] = target
        candidate = CandidateRecord(wh, trace_to_json(record.trace))
        candidates[candidate.candidate_hash] = candidate
        times = tuple(float(t) for t in (record.run_secs or ()))
        ok = bool(times) and all(math.isfinite(t) and 0 <= t < _FAILED_AT_S for t in times)
        results.append(MeasureRecord(
            candidate_hash=candidate.candidate_hash, workload_hash=wh, target_hash=target.target_hash,
            status=MeasureStatus.OK if ok else MeasureStatus.RUN_ERROR, times_s=times if ok else (),
            error="" if ok else "failed in MetaSchedule", worker="metaschedule",
        ))
    counts = db.import_records(list(targets.values()), list(workloads.values()), list(candidates.values()), results)
    return {"workloads": len(workloads), "records": len(results), **counts}


def export_metaschedule(db, directory: str | Path) -> dict[str, int]:
    """Write every trial of ``db`` as a MetaSchedule JSON database in ``directory``.

    Re-measurements of a kernel's leaders (``MeasureRecord.confirm``) are left
    out: MetaSchedule keeps one tuning record per trial and would take each as
    another trial.

    Appends to the files when they exist (``JSONDatabase`` semantics). Returns
    counts of ``workloads`` and ``records`` written.

    Raises
    ------
    DatabaseError
        When the directory cannot be written or a stored trace no longer applies.
    """
    import tvm

    from measure.tvmapi import (
        ArgInfo,
        JSONDatabase,
        TuningRecord,
        load_trace,
        make_target,
    )

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        ms_db = JSONDatabase(str(directory / WORKLOAD_FILE), str(directory / RECORD_FILE))
    except Exception as exc:  # OSError, or what TVM raises (ValueError, RuntimeError: TVM 0.27 has no TVMError)
        raise DatabaseError(f"cannot write a MetaSchedule database in {directory}: {_first_line(exc)}") from None
    funcs, ms_workloads, written = {}, {}, 0
    for target_rec in db.targets():
        target = make_target(json.loads(target_rec.target_json))
        for record, trace_json in db.measure_results(target_rec.target_hash):
            if record.confirm:
                continue
            wh = record.workload_hash
            if wh not in funcs:
                workload = db.get_workload(wh)
                funcs[wh] = tvm.script.from_source(workload.script).with_attr("global_symbol", "main")
                ms_workloads[wh] = ms_db.commit_workload(tvm.IRModule({"main": funcs[wh]}))
            try:
                trace = load_trace(funcs[wh], trace_json)
            except Exception as exc:  # TVM raises several error types for a trace that no longer applies
                raise DatabaseError(f"candidate {record.candidate_hash} does not apply: {_first_line(exc)}") from None
            run_secs = list(record.times_s) if record.status == MeasureStatus.OK else [FAILED_RUN_S]
            ms_db.commit_tuning_record(TuningRecord(
                trace, ms_workloads[wh], run_secs, target, ArgInfo.from_prim_func(funcs[wh])))
            written += 1
    return {"workloads": len(ms_workloads), "records": written}


def _read(directory: Path) -> list:
    """Every tuning record of a MetaSchedule directory, or a one-line DatabaseError."""
    for name in (WORKLOAD_FILE, RECORD_FILE):
        if not (directory / name).is_file():
            raise DatabaseError(f"{directory} is not a MetaSchedule database: {name} is missing")
    from measure.tvmapi import JSONDatabase

    try:
        ms_db = JSONDatabase(str(directory / WORKLOAD_FILE), str(directory / RECORD_FILE), allow_missing=False)
        return list(ms_db.get_all_tuning_records())
    except Exception as exc:  # noqa: BLE001 - TVM raises several types for a corrupt file
        raise DatabaseError(f"corrupt MetaSchedule database in {directory}: {_first_line(exc)}") from None


def _workload_record(func, workload_hash: str, flops: float, kind: str) -> WorkloadRecord:
    from tvm.runtime import DataType

    from measure.tvmapi import ArgInfo

    shapes = [{"shape": [int(d) for d in a.shape], "dtype": str(a.dtype)} for a in ArgInfo.from_prim_func(func)]
    nbytes = sum(math.prod(s["shape"]) * DataType(s["dtype"]).bits // 8 for s in shapes)
    name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
    return WorkloadRecord(
        workload_hash=workload_hash, name=name, op_kind=kind,
        script=func.without_attr("global_symbol").script(), shapes_json=json.dumps(shapes),
        flops=float(flops), bytes_moved=float(nbytes),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
