"""The trial budget is claimed with the candidates: no workload ends above it, whoever claims."""

from __future__ import annotations

import threading

from database import open_database


def _session(db, tag: str = "s") -> int:
    return db.start_session({"job": tag}, tag, f"{tag}-model")


def _hashes(candidates) -> list[str]:
    return [c.candidate_hash for c in candidates]


def _trials_per_candidate(db, target, workload) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record, _ in db.measure_results(target.target_hash):
        if record.workload_hash == workload.workload_hash and not record.confirm:
            counts[record.candidate_hash] = counts.get(record.candidate_hash, 0) + 1
    return counts


def test_live_claims_of_others_take_the_budget(seeded):
    db, target, workload, candidates = seeded
    a, b = _session(db, "a"), _session(db, "b")
    th = target.target_hash
    assert db.claim_candidates(_hashes(candidates[:2]), th, a, trials=3) == set(_hashes(candidates[:2]))
    # two of three are taken by a's live claims: b gets the first free one in the order asked
    assert db.claim_candidates(_hashes(candidates[::-1]), th, b, trials=3) == {candidates[3].candidate_hash}
    assert db.trials_taken(workload.workload_hash, th) == 3
    assert db.claim_candidates(_hashes(candidates), th, b, trials=3) == {candidates[3].candidate_hash}  # renewed
    assert db.claim_candidates(_hashes(candidates[2:3]), th, a, trials=3) == set()


def test_a_session_renews_its_claims_within_the_budget(seeded):
    db, target, _, candidates = seeded
    a = _session(db, "a")
    th = target.target_hash
    assert db.claim_candidates(_hashes(candidates[:2]), th, a, trials=2) == set(_hashes(candidates[:2]))
    assert db.claim_candidates(_hashes(candidates), th, a, trials=2) == set(_hashes(candidates[:2]))


def test_trials_count_but_confirmations_do_not(seeded, make):
    db, target, workload, candidates = seeded
    a = _session(db, "a")
    th = target.target_hash
    db.add_measure_results([make.measure(candidates[0], target, status="build_error")])  # imported: a trial
    db.add_measure_results([make.measure(candidates[1], target, session_id=a)])
    db.add_measure_results([make.measure(candidates[1], target, session_id=a, confirm=True)] * 3)
    assert db.trials_taken(workload.workload_hash, th) == 2
    assert db.claim_candidates(_hashes(candidates), th, a, trials=3) == {candidates[2].candidate_hash}


def test_claims_of_dead_sessions_free_the_budget(seeded):
    db, target, workload, candidates = seeded
    a, b, c = _session(db, "a"), _session(db, "b"), _session(db, "c")
    th = target.target_hash
    db.claim_candidates(_hashes(candidates[:2]), th, a, trials=2)
    assert db.claim_candidates(_hashes(candidates[2:]), th, b, trials=2) == set()
    db.finish_session(a, "interrupted")
    assert db.trials_taken(workload.workload_hash, th) == 0
    assert db.claim_candidates(_hashes(candidates[2:]), th, b, trials=2) == set(_hashes(candidates[2:]))
    db.claim_candidates(_hashes(candidates[:2]), th, c, trials=4, ttl_s=0.0)  # expired at once
    assert db.claim_candidates(_hashes(candidates[:2]), th, b, trials=4) == set(_hashes(candidates[:2]))


def test_concurrent_claimers_never_take_a_workload_past_its_budget(db_url, make):
    """Three threads, each its own session and connection, claim and measure batches of one workload."""
    budget = 5
    target, workload, candidates = make.shared(db_url, 30)
    by_hash = {c.candidate_hash: c for c in candidates}
    hashes = _hashes(candidates)
    measured: dict[int, list[str]] = {}
    start = threading.Barrier(3)

    def tuner(i: int) -> None:
        with open_database(db_url) as own:
            session = _session(own, f"t{i}")
            start.wait()
            mine: list[str] = []
            for lo in range(0, 30, 2):  # overlapping batches of 3, in a different order per thread
                batch = hashes[(lo + 4 * i) % 30:][:3]
                held = own.claim_candidates(batch, target.target_hash, session, trials=budget)
                own.add_measure_results([make.measure(by_hash[h], target, session_id=session) for h in held])
                mine += held
                if not held and own.trials_taken(workload.workload_hash, target.target_hash) >= budget:
                    break
            measured[i] = mine

    make.in_threads(tuner, 3)
    every = [h for mine in measured.values() for h in mine]
    assert len(every) == len(set(every)) == budget
    with open_database(db_url) as db:
        trials = _trials_per_candidate(db, target, workload)
        assert sum(trials.values()) == budget and set(trials.values()) == {1}
        assert db.trials_taken(workload.workload_hash, target.target_hash) == budget
