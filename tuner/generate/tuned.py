"""Tune the kernels of a whole model's programs through the tuning database, then compile with them.

Each (program, bucket) is lowered to kernels (:func:`tuner.kernels.lower_to_kernels` of its
prepared module); kernels of equal workload (the same kernel in two buckets or two
programs) are tuned once. The :class:`~tuner.search.tune.Tuner` measures up to
``trials`` candidates per workload into the database under one session (``trials`` 0
measures nothing); each kernel then gets the schedule :func:`tuner.choose.price_programs`
picks (its best measurement, else the cost model's pick: the database's own model, else the
shipped pretrained one, :func:`tuner.cost_model.store.starting_model`; else the roofline's) and the
program is built with them (:func:`tuner.compile.build_tuned`). The e-graph's rewrites
(Q/K/V and gate/up merges, fusion) are not applied to these programs yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm

from database import Heartbeat, SessionStatus, open_database

from ..choose import price_programs
from ..compile import build_tuned
from ..cost_model.store import save_model, starting_model
from ..kernels import kernels_of, lower_to_kernels
from ..search.search import ModelTrainer, SearchConfig
from ..search.tune import Tuner
from ..space.space import ScheduleSpace

__all__ = ["TunedPrograms", "tune_programs"]


@dataclass(frozen=True)
class _Shape:
    """What :func:`tuner.choose.price_programs` needs of a program: a key (``term_hash``)."""

    term_hash: str


@dataclass
class TunedPrograms:
    """The schedules chosen for the kernels of every program shape, and where they came from.

    ``compile(spec, prepared)`` builds one shape with its kernels' schedules (the
    ``compile_program`` of :func:`tuner.generate.build.build_artifact`); ``tuning`` is
    the manifest's record: the session id and, per workload, the chosen candidate, its
    source (``measured``, ``predicted`` or ``roofline``), its latency and the shapes that use it.
    """

    target: tvm.target.Target
    fused: dict
    scheduled: dict
    tuning: dict

    def compile(self, spec, _prepared):
        """The executable of ``spec``'s shape (``relax.Executable``)."""
        key = (spec.program, spec.tokens, spec.cache)
        return build_tuned(self.fused[key], self.scheduled[key], self.target)


def tune_programs(prepared: dict, *, target, db_url: str | None, trials: int, seed: int, measure_config,
                  tracker: str | None, model: str, model_hash: str, args: dict, progress) -> TunedPrograms:
    """Tune and choose the schedules of ``prepared``: ``(program, tokens, cache) -> prepared module``.

    ``target`` is a :class:`tuner.target.ResolvedTarget`. The session is recorded as
    ``finished``, or ``failed``/``interrupted`` when tuning raises.

    Raises
    ------
    database.DatabaseError, measure.TrackerError, tuner.options.TuneError
        As ``tune run``.
    """
    graphs, fused = [], {}
    for key, mod in prepared.items():
        fused[key] = lower_to_kernels(mod)
        graphs.append((_Shape("-".join(map(str, key))), fused[key], kernels_of(fused[key])))
    workloads = {}
    for _, _, kernels in graphs:
        for k in kernels:
            workloads.setdefault(k.workload.workload_hash, k)
    progress.note(f"{len(graphs)} program shapes, {len(workloads)} distinct workloads")
    db = open_database(db_url)
    try:
        db.add_target(target.record)
        for k in workloads.values():
            db.add_workload(k.workload)
        session_id = db.start_session(args, model, model_hash)
        try:
            with Heartbeat(db, session_id):
                spaces = {h: ScheduleSpace(k.func, h, target.target, seed=seed) for h, k in workloads.items()}
                trainer = ModelTrainer(starting_model(db, target.target_hash, target.target.kind.name, progress.note))
                if trials:
                    with Tuner(target, measure_config, SearchConfig(trials=trials, seed=seed), tracker,
                               progress) as tuner:
                        tuner.open(db, session_id)
                        tuner.tune(workloads, spaces, trainer)
                        tuner.measurer.release()
                    progress.stop_tuning()
                    save_model(db, target.target_hash, trainer)
                with progress.status("choosing each kernel's schedule"):
                    _, choices = price_programs(db, graphs, spaces, target.target_hash, trainer)
        except KeyboardInterrupt:
            db.finish_session(session_id, SessionStatus.INTERRUPTED)
            raise
        except BaseException:
            db.finish_session(session_id, SessionStatus.FAILED)
            raise
        db.finish_session(session_id, SessionStatus.FINISHED)
    finally:
        db.close()
    scheduled, used = {}, {}
    for (shape, _, kernels), key in zip(graphs, prepared):
        scheduled[key] = {}
        for k in kernels:
            wh = k.workload.workload_hash
            choice = choices[wh]
            if choice.scheduled:
                scheduled[key][k.name] = spaces[wh].replay(choice.record).mod
            used.setdefault(wh, {"workload": wh, "name": k.workload.name, "source": choice.source,
                                 "latency_s": choice.seconds, "shapes": [],
                                 "candidate": choice.record.candidate_hash if choice.record else None})
            used[wh]["shapes"].append(shape.term_hash)
    return TunedPrograms(target.target, fused, scheduled, {"sessions": [session_id], "schedules": list(used.values())})
