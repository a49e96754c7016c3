"""The models a database has seen: what each tuning session recorded about its model.

A session stores the model's display source and hash in its own columns and, in its
``args`` JSON, the ``model`` argument as given and (since content hashes were recorded)
``model_content_hash``: the SHA-256 of the model file's bytes.  Graph candidates of a
model hash no session recorded (written by other tools) are listed with empty names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.engine import Connection

from .models import GraphCandidate, TuningSession

CONTENT_HASH_ARG = "model_content_hash"


@dataclass(frozen=True, order=True)
class RecordedModel:
    """One model as sessions recorded it.

    ``source``: the display source (``a/config.json prefill seq_len=128 layers=1``);
    ``model_hash``: the hash of the imported program (one per stage and size);
    ``given``: the model argument as given to ``tune run`` ("" if not recorded);
    ``content_hash``: hex SHA-256 of the model file ("" for sessions older than it).
    """

    source: str
    model_hash: str
    given: str = ""
    content_hash: str = ""

    @property
    def name(self) -> str:
        """The model as a person would give it: the argument as given, else the source."""
        return self.given or self.source or self.model_hash


def recorded_models(conn: Connection) -> list[RecordedModel]:
    """Every distinct model of the sessions, then graph-candidate model hashes no session names, sorted."""
    seen: set[RecordedModel] = set()
    for source, model_hash, args_json in conn.execute(
            select(TuningSession.model_source, TuningSession.model_hash, TuningSession.args).distinct()):
        try:
            args = json.loads(args_json)
        except (TypeError, ValueError):
            args = {}
        args = args if isinstance(args, dict) else {}
        seen.add(RecordedModel(source, model_hash, _text(args.get("model")), _text(args.get(CONTENT_HASH_ARG))))
    named = {m.model_hash for m in seen}
    for model_hash in conn.scalars(select(GraphCandidate.model_hash).distinct()):
        if model_hash not in named:
            seen.add(RecordedModel("", model_hash))
    return sorted(seen)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
