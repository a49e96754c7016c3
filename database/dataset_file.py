"""The cost model's data set as one file: ``tune dataset export`` / ``import`` / ``stats``.

Format (version :data:`FORMAT_VERSION`): gzip-compressed UTF-8 JSON lines, written
with a zero gzip time stamp so the same records give the same bytes.

- Line 1, the header: ``{"format": "tune-dataset", "version": 1, "feature_version": ...,
  "counts": {...}, "sha256": ...}``. ``feature_version`` is the cost model's feature
  version of the code that wrote the file (features are not stored: they are
  recomputed from each workload's TVMScript and each candidate's trace);
  ``counts`` the lines of each kind below; ``sha256`` the hex SHA-256 of every byte
  after the header's newline, so a truncated or edited file is refused.
- Then one JSON object a line, by ``kind``, in this order:
  ``target`` (``target_hash``, ``target_json``, ``key``);
  ``session`` (``session``: its key, ``model_source``, ``model_hash``, ``code_version``,
  ``args``: what the session recorded, the model and stage it measured, and for a
  collector's session the CPU that measured it and the load average when it began);
  ``workload`` (the fields of :class:`~database.records.WorkloadRecord`: the kernel's
  hash, name, op kind, TVMScript, buffer shapes and dtypes, FLOPs, bytes);
  ``candidate`` (``candidate_hash``, ``workload_hash``, ``trace_json``);
  ``record``: one measurement (``candidate_hash``, ``target_hash``, ``session``: a
  session key or null, ``status``, ``times_s``: repeat times in seconds, ``build_time_s``,
  ``error``, ``worker``, ``confirm``: a re-measurement of a leader, not a trial).

A session's key is the SHA-256 of its source, model hash, arguments and start time;
an imported session keeps its key in its arguments (:data:`SESSION_KEY_ARG`), so a
file exported, imported elsewhere and exported again names its sessions the same.

Importing is idempotent (a measurement already held, same candidate, target,
status and repeat times, is skipped) and keeps every existing record. Exporting
over a file refuses when the file holds measurements the database lacks: import
the file first, so the file only grows.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections import Counter
from dataclasses import fields
from pathlib import Path

from .records import CandidateRecord, MeasureRecord, TargetRecord, WorkloadRecord, canonical_json, sha256_text
from .session import DatabaseError
from .status import SessionStatus

FORMAT = "tune-dataset"
FORMAT_VERSION = 1
#: session argument holding the key of a session imported from a data set file
SESSION_KEY_ARG = "dataset_session"
KINDS = ("target", "session", "workload", "candidate", "record")
_WORKLOAD_FIELDS = [f.name for f in fields(WorkloadRecord)]
_RECORD_FIELDS = ("candidate_hash", "target_hash", "session", "status", "times_s", "build_time_s", "error",
                  "worker", "confirm")


class DatasetFileError(ValueError):
    """A data set file that cannot be used: another format version, truncated, edited or inconsistent."""


def session_key(session: dict) -> str:
    """A session's key in a data set file: the one it was imported under, else the SHA-256 of its content."""
    stored = session["args"].get(SESSION_KEY_ARG)
    if isinstance(stored, str) and stored:
        return stored
    return sha256_text(canonical_json([session["model_source"], session["model_hash"], session["args"],
                                       session["started_at"]]))


def export_dataset(db, path: str | Path, feature_version: str) -> dict:
    """Write every measurement of ``db`` to the data set file ``path`` (replaced atomically).

    Parameters
    ----------
    db : database.Database
        The source.
    path : str or Path
        The file to write (gzip JSON lines, see the module docstring).
    feature_version : str
        The cost model's feature version of this code, stated in the header.

    Returns
    -------
    dict
        The header's counts (``records``, ``candidates``, ``workloads``, ``targets``, ``sessions``).

    Raises
    ------
    DatasetFileError
        ``path`` exists and holds measurements the database lacks (import it first),
        or is not a readable data set file.
    DatabaseError
        The file cannot be written.
    """
    path = Path(path)
    lines = _dataset_lines(db)
    if path.exists():
        existing = {_measurement_key(r) for r in read_dataset(path)["record"]}
        missing = existing - {_measurement_key(r) for r in lines["record"]}
        if missing:
            raise DatasetFileError(f"{path} holds {len(missing)} measurements this database lacks: "
                                   f"run `tune dataset import {path}` on it first, so the file only grows")
    body = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n"
                   for kind in KINDS for line in lines[kind]).encode()
    counts = {f"{kind}s" if kind != "record" else "records": len(lines[kind]) for kind in KINDS}
    header = {"format": FORMAT, "version": FORMAT_VERSION, "feature_version": feature_version, "counts": counts,
              "sha256": hashlib.sha256(body).hexdigest()}
    data = (json.dumps(header, sort_keys=True) + "\n").encode() + body
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
                out.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private; a data set file is not
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except OSError as exc:
        raise DatabaseError(f"cannot write {path}: {exc.strerror or exc}") from None
    return counts


def _dataset_lines(db) -> dict[str, list[dict]]:
    """The body lines of ``db``'s data set, by kind, in file order."""
    sessions = {s["id"]: s for s in db.sessions()}
    targets, records, candidates, used_sessions = [], [], {}, {}
    for target in db.targets():
        targets.append({"kind": "target", "target_hash": target.target_hash, "target_json": target.target_json,
                        "key": target.key})
        for record, trace_json in db.measure_results(target.target_hash):
            candidates[record.candidate_hash] = {"kind": "candidate", "candidate_hash": record.candidate_hash,
                                                 "workload_hash": record.workload_hash, "trace_json": trace_json}
            session = sessions.get(record.session_id)
            key = None
            if session is not None:
                key = session_key(session)
                used_sessions[key] = {
                    "kind": "session", "session": key, "model_source": session["model_source"],
                    "model_hash": session["model_hash"], "code_version": session["code_version"],
                    "args": {k: v for k, v in session["args"].items() if k != SESSION_KEY_ARG}}
            records.append({"kind": "record", "candidate_hash": record.candidate_hash,
                            "target_hash": record.target_hash, "session": key, "status": str(record.status),
                            "times_s": [float(t) for t in record.times_s], "build_time_s": float(record.build_time_s),
                            "error": record.error, "worker": record.worker, "confirm": bool(record.confirm)})
    workloads = []
    for wh in sorted({c["workload_hash"] for c in candidates.values()}):
        workload = db.get_workload(wh)
        workloads.append({"kind": "workload", **{name: getattr(workload, name) for name in _WORKLOAD_FIELDS}})
    return {"target": targets, "session": [used_sessions[k] for k in sorted(used_sessions)], "workload": workloads,
            "candidate": [candidates[h] for h in sorted(candidates)], "record": records}


def _measurement_key(record: dict) -> tuple:
    return (record["candidate_hash"], record["target_hash"], record["status"],
            json.dumps([float(t) for t in record["times_s"]]))


def read_dataset(path: str | Path) -> dict:
    """Read and check a data set file: ``{"header": dict, "target": [...], "session": [...], ...}`` by kind.

    Raises
    ------
    DatasetFileError
        One line naming the problem: no such file, not gzip or truncated, another
        format or format version, a checksum or count that does not match (an edited
        file), a line of an unknown kind or missing a field, a hash that does not
        match its content, or a reference to an undeclared target, session, workload
        or candidate (records of an unknown target, say).
    """
    path = Path(path)
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise DatasetFileError(f"no data set file at {path}") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetFileError(f"{path} is truncated or not a gzip data set file: {exc}") from None
    head, _, body = data.partition(b"\n")
    try:
        header = json.loads(head)
    except ValueError:
        raise DatasetFileError(f"{path} does not start with a data set header line") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DatasetFileError(f"{path} is not a {FORMAT} file")
    if header.get("version") != FORMAT_VERSION:
        raise DatasetFileError(f"{path} has format version {header.get('version')!r}; this code reads version "
                               f"{FORMAT_VERSION} only")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise DatasetFileError(f"{path} does not match its checksum: the file was truncated or edited")
    out: dict = {"header": header, **{kind: [] for kind in KINDS}}
    for number, raw in enumerate(body.decode("utf-8", errors="replace").splitlines(), start=2):
        try:
            line = json.loads(raw)
            out[line["kind"]].append(line)
        except (ValueError, KeyError, TypeError):
            raise DatasetFileError(f"{path} line {number}: not a line of a known kind ({', '.join(KINDS)})") from None
    counts = {f"{kind}s" if kind != "record" else "records": len(out[kind]) for kind in KINDS}
    if counts != header.get("counts"):
        raise DatasetFileError(f"{path}: its lines ({counts}) differ from the header's counts {header.get('counts')}")
    _check_references(path, out)
    return out


def _check_references(path: Path, data: dict) -> None:
    """Every hash matches its content and every reference names a declared line (DatasetFileError otherwise)."""
    try:
        targets = {t["target_hash"] for t in data["target"]
                   if TargetRecord(t["target_json"], t["key"]).target_hash == t["target_hash"]}
        if len(targets) != len(data["target"]):
            raise DatasetFileError(f"{path}: a target's hash does not match its JSON and key")
        workloads = {WorkloadRecord(**{n: w[n] for n in _WORKLOAD_FIELDS}).workload_hash for w in data["workload"]}
        candidates = set()
        for c in data["candidate"]:
            if CandidateRecord(c["workload_hash"], c["trace_json"]).candidate_hash != c["candidate_hash"]:
                raise DatasetFileError(f"{path}: candidate {c['candidate_hash']} does not match its trace")
            if c["workload_hash"] not in workloads:
                raise DatasetFileError(f"{path}: candidate {c['candidate_hash']} names unknown workload "
                                       f"{c['workload_hash']}")
            candidates.add(c["candidate_hash"])
        sessions = {s["session"] for s in data["session"] if isinstance(s["args"], dict)}
        for r in data["record"]:
            missing = [f for f in _RECORD_FIELDS if f not in r]
            if missing:
                raise DatasetFileError(f"{path}: a record lacks {', '.join(missing)}")
            if r["target_hash"] not in targets:
                raise DatasetFileError(f"{path}: a record names unknown target {r['target_hash']}")
            if r["candidate_hash"] not in candidates:
                raise DatasetFileError(f"{path}: a record names unknown candidate {r['candidate_hash']}")
            if r["session"] is not None and r["session"] not in sessions:
                raise DatasetFileError(f"{path}: a record names unknown session {r['session']}")
    except (KeyError, TypeError) as exc:
        raise DatasetFileError(f"{path}: a line lacks the field {exc}") from None


def import_dataset(db, path: str | Path) -> dict[str, int]:
    """Add a data set file's records to ``db``; importing the same file twice adds nothing.

    The file is read and checked whole before anything is written; its
    measurements go in one transaction (all or none). A session of the file that
    ``db`` does not hold (by key, :func:`session_key`) is added, ended ``finished``.

    Returns
    -------
    dict
        ``records`` in the file, ``measure_results`` added, ``skipped`` (already
        present), ``sessions`` added, ``workloads`` in the file.

    Raises
    ------
    DatasetFileError
        As :func:`read_dataset`, or a measurement of an unknown status.
    DatabaseError
        The database refuses the records.
    """
    data = read_dataset(path)
    try:
        targets = [TargetRecord(t["target_json"], t["key"]) for t in data["target"]]
        workloads = [WorkloadRecord(**{n: w[n] for n in _WORKLOAD_FIELDS}) for w in data["workload"]]
        candidates = [CandidateRecord(c["workload_hash"], c["trace_json"]) for c in data["candidate"]]
        workload_of = {c.candidate_hash: c.workload_hash for c in candidates}
        pending = [MeasureRecord(candidate_hash=r["candidate_hash"], workload_hash=workload_of[r["candidate_hash"]],
                                 target_hash=r["target_hash"], status=r["status"],
                                 times_s=tuple(float(t) for t in r["times_s"]),
                                 build_time_s=float(r["build_time_s"]), error=str(r["error"]),
                                 worker=str(r["worker"]), confirm=bool(r["confirm"])) for r in data["record"]]
    except (ValueError, TypeError) as exc:
        raise DatasetFileError(f"{path}: {exc}") from None
    known = {session_key(s): s["id"] for s in db.sessions()}
    added_sessions = 0
    for s in data["session"]:
        if s["session"] in known:
            continue
        sid = db.start_session({**s["args"], SESSION_KEY_ARG: s["session"]}, s["model_source"], s["model_hash"],
                               code_version=s["code_version"])
        db.finish_session(sid, SessionStatus.FINISHED)
        known[s["session"]] = sid
        added_sessions += 1
    results = [MeasureRecord(**{**{f.name: getattr(m, f.name) for f in fields(MeasureRecord)},
                                "session_id": known.get(r["session"])})
               for m, r in zip(pending, data["record"])]
    counts = db.import_records(targets, workloads, candidates, results)
    return {"records": len(results), "workloads": len(workloads), "sessions": added_sessions, **counts}


def record_cpu(session: dict | None, target_json: str) -> str:
    """The CPU that measured a record: the collector's ``cpu`` argument (model name and LLVM name), else the
    target's ``mcpu``, else ``unknown``."""
    cpu = (session or {}).get("args", {}).get("cpu")
    if isinstance(cpu, dict) and (cpu.get("model_name") or cpu.get("llvm_cpu")):
        return f"{cpu.get('model_name') or '?'} ({cpu.get('llvm_cpu') or '?'})"
    try:
        mcpu = json.loads(target_json).get("mcpu")
    except (ValueError, AttributeError):
        mcpu = None
    return f"? ({mcpu})" if mcpu else "unknown"


def dataset_stats(path: str | Path) -> dict:
    """What a data set file holds: ``records``, ``ok_records``, ``candidates``, ``workloads``, ``targets``,
    ``sessions``, ``format_version``, ``feature_version``, ``sha256`` (the body's checksum), and records per
    ``cpu``, per ``model`` and stage, and workloads per ``op_kind``.

    Raises
    ------
    DatasetFileError
        As :func:`read_dataset`.
    """
    data = read_dataset(path)
    sessions = {s["session"]: s for s in data["session"]}
    targets = {t["target_hash"]: t["target_json"] for t in data["target"]}
    cpus, models = Counter(), Counter()
    for r in data["record"]:
        session = sessions.get(r["session"])
        cpus[record_cpu(session, targets[r["target_hash"]])] += 1
        args = (session or {}).get("args", {})
        models[f"{args.get('model', '?')} {args.get('stage', '?')}"] += 1
    header = data["header"]
    return {"format_version": header["version"], "feature_version": header["feature_version"],
            "sha256": header["sha256"],
            "records": len(data["record"]), "ok_records": sum(r["status"] == "ok" for r in data["record"]),
            "candidates": len(data["candidate"]), "workloads": len(data["workload"]),
            "targets": len(data["target"]), "sessions": len(data["session"]),
            "cpu": dict(cpus), "model": dict(models),
            "op_kind": dict(Counter(w["op_kind"] for w in data["workload"]))}
