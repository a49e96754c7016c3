"""Candidate claims: one holder per candidate and target, dead holders taken over."""

from __future__ import annotations

import threading
import time

import pytest

from database import DatabaseError, open_database, upgrade
from database.liveness import STALE_ENV, Heartbeat


def _session(db, tag: str = "s") -> int:
    return db.start_session({"job": tag}, tag, f"{tag}-model")


def _hashes(candidates) -> list[str]:
    return [c.candidate_hash for c in candidates]


def test_a_live_holder_keeps_its_claims(seeded):
    db, target, _, candidates = seeded
    a, b = _session(db, "a"), _session(db, "b")
    assert db.claim_candidates(_hashes(candidates[:3]), target.target_hash, a) == set(_hashes(candidates[:3]))
    assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == {candidates[3].candidate_hash}
    # a session renews its own claims
    assert db.claim_candidates(_hashes(candidates[:1]), target.target_hash, a) == {candidates[0].candidate_hash}


def test_a_claim_is_per_target(seeded, make):
    db, target, _, candidates = seeded
    other = make.target("cuda", key="gpu")
    db.add_target(other)
    a, b = _session(db, "a"), _session(db, "b")
    assert db.claim_candidates(_hashes(candidates), target.target_hash, a) == set(_hashes(candidates))
    assert db.claim_candidates(_hashes(candidates), other.target_hash, b) == set(_hashes(candidates))


def test_measured_candidates_are_never_claimed_again(seeded, make):
    db, target, _, candidates = seeded
    a, b = _session(db, "a"), _session(db, "b")
    db.claim_candidates(_hashes(candidates[:2]), target.target_hash, a)
    db.add_measure_results([make.measure(candidates[0], target, session_id=a)])
    db.add_measure_results([make.measure(candidates[3], target, status="build_error")])  # e.g. imported
    assert db.finish_session(a, "finished") == 1  # the claim a did not measure is released
    # a's unmeasured claim is free now that a has ended; the measured ones stay taken
    assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == set(_hashes(candidates[1:3]))
    assert db.claim_candidates(_hashes(candidates[:1]), target.target_hash, a) == set()


def test_claims_of_an_ended_session_are_taken_over(seeded):
    db, target, _, candidates = seeded
    a, b = _session(db, "a"), _session(db, "b")
    db.claim_candidates(_hashes(candidates), target.target_hash, a)
    assert db.finish_session(a, "interrupted") == 4
    assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == set(_hashes(candidates))


def test_claims_of_a_silent_session_are_taken_over(seeded, monkeypatch):
    db, target, _, candidates = seeded
    # The stale bound is 30 heartbeats long, so a heartbeat thread starved by a loaded machine still counts as live.
    monkeypatch.setenv(STALE_ENV, "1.5")
    a, b = _session(db, "a"), _session(db, "b")
    with Heartbeat(db, a, interval_s=0.05):
        db.claim_candidates(_hashes(candidates), target.target_hash, a)
        time.sleep(2.0)
        assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == set()  # a still beats
    time.sleep(2.0)  # a is silent: dead
    assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == set(_hashes(candidates))
    db.heartbeat(b)
    assert db.mark_stale_sessions_interrupted(1.5) == 1  # a only


def test_expired_claims_are_taken_over(seeded):
    db, target, _, candidates = seeded
    a, b = _session(db, "a"), _session(db, "b")
    db.claim_candidates(_hashes(candidates), target.target_hash, a, ttl_s=0.0)
    time.sleep(0.05)
    assert db.claim_candidates(_hashes(candidates), target.target_hash, b) == set(_hashes(candidates))


def test_unknown_candidate_is_an_error(seeded):
    db, target, _, _ = seeded
    with pytest.raises(DatabaseError, match="unknown candidate"):
        db.claim_candidates(["no-such-hash"], target.target_hash, _session(db))


def test_concurrent_claimers_never_share_a_candidate(db_url, make):
    """Six threads, each its own session and connection, claim overlapping halves at once."""
    target, _, candidates = make.shared(db_url, 40)
    hashes = _hashes(candidates)
    held: dict[int, set[str]] = {}
    start = threading.Barrier(6)

    def claimer(i: int) -> None:
        with open_database(db_url) as own:
            session = _session(own, f"t{i}")
            start.wait()
            mine = set()
            for lo in range(0, 40, 5):  # overlapping windows, in a different order per thread
                window = hashes[(lo + 7 * i) % 40:][:10]
                mine |= own.claim_candidates(window, target.target_hash, session)
            held[i] = mine

    make.in_threads(claimer, 6)
    assert len(held) == 6
    every = [h for mine in held.values() for h in mine]
    assert len(every) == len(set(every))  # no candidate held twice
    assert set(every) == set(hashes)  # and every one is held by someone


def test_a_database_without_claims_must_be_upgraded(db_url):
    upgrade(db_url, "0001")
    with pytest.raises(DatabaseError, match=r"revision 0001.*run `tune db upgrade"):
        open_database(db_url)
    upgrade(db_url)
    with open_database(db_url) as db:
        assert db.stats()["candidate_claim"] == 0
