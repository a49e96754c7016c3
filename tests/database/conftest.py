"""Fixtures: every database test runs on SQLite and, when configured, PostgreSQL.

PostgreSQL tests run only when ``TUNE_TEST_POSTGRES_URL`` names a server; each test
gets its own schema (through ``search_path``), dropped afterwards.
"""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import pytest
from sqlalchemy.engine import make_url

from database import (
    CandidateRecord,
    MeasureRecord,
    TargetRecord,
    WorkloadRecord,
    canonical_json,
    open_database,
)
from database.scratch import scratch_postgres_schema

PG_ENV = "TUNE_TEST_POSTGRES_URL"
PG_SKIP = "set TUNE_TEST_POSTGRES_URL=postgresql+psycopg://USER@HOST:5432/DB to run the PostgreSQL tests"


def _pg_base_url():
    raw = os.environ.get(PG_ENV)
    if not raw:
        pytest.skip(PG_SKIP)
    url = make_url(raw)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A URL of an empty, private database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tune.db'}"
        return
    with scratch_postgres_schema(_pg_base_url().render_as_string(hide_password=False), "tune_test") as url:
        yield url


@pytest.fixture
def db(db_url):
    """An opened database, closed after the test."""
    database = open_database(db_url)
    yield database
    database.close()


def make_target(name: str = "llvm", key: str = "local") -> TargetRecord:
    return TargetRecord(target_json=canonical_json({"kind": name}), key=key)


def make_workload(tag: str = "w1") -> WorkloadRecord:
    return WorkloadRecord(
        workload_hash=f"{tag}-hash",
        name=f"fused_{tag}",
        op_kind="matmul",
        script=f"# TVMScript of {tag}",
        shapes_json=canonical_json([{"shape": [4, 4], "dtype": "float32"}]),
        flops=128.0,
        bytes_moved=192.0,
    )


def make_candidate(workload: WorkloadRecord, i: int) -> CandidateRecord:
    return CandidateRecord(workload.workload_hash, canonical_json([[f"step{i}"], []]))


def measure(
    candidate: CandidateRecord, target: TargetRecord, times=(1e-3,), status="ok", **kw
) -> MeasureRecord:
    return MeasureRecord(
        candidate_hash=candidate.candidate_hash,
        workload_hash=candidate.workload_hash,
        target_hash=target.target_hash,
        status=status,
        times_s=tuple(times) if status == "ok" else (),
        error="" if status == "ok" else f"{status} happened",
        **kw,
    )


def shared(url: str, n: int) -> tuple[TargetRecord, WorkloadRecord, list[CandidateRecord]]:
    """Add one target, one workload and ``n`` of its candidates to the database at ``url``."""
    target, workload = make_target(), make_workload()
    candidates = [make_candidate(workload, i) for i in range(n)]
    with open_database(url) as db:
        db.add_target(target)
        db.add_workload(workload)
        db.add_candidates(candidates)
    return target, workload, candidates


def in_threads(work, n: int) -> None:
    """Run ``work(i)`` for i in range(n), each in its own thread, at once; re-raise the first error."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # re-raised by the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.fixture
def make():
    """Record factories: ``make.target()``, ``make.workload()``, ``make.candidate()``, ``make.measure()``;
    ``make.shared(url, n)`` seeds a database, ``make.in_threads(work, n)`` runs concurrent workers."""
    return SimpleNamespace(
        target=make_target, workload=make_workload, candidate=make_candidate, measure=measure,
        shared=shared, in_threads=in_threads,
    )


@pytest.fixture
def seeded(db):
    """A database with one target, one workload and four candidates."""
    target, workload = make_target(), make_workload()
    db.add_target(target)
    db.add_workload(workload)
    candidates = [make_candidate(workload, i) for i in range(4)]
    db.add_candidates(candidates)
    return db, target, workload, candidates
