"""The cost model's life in the database: warm start from the newest compatible version, save after a run."""

from __future__ import annotations

from .cost_model import FEATURE_VERSION, XGBCostModel


def load_warm_model(db, target_hash: str) -> XGBCostModel | None:
    """The newest stored model for ``target_hash`` and this code's feature version, or None."""
    saved = db.latest_cost_model(target_hash, FEATURE_VERSION)
    return None if saved is None else XGBCostModel.load(saved[0])


def save_model(db, target_hash: str, trainer) -> None:
    """Store the session's model (if it was ever fitted) with its training record count."""
    if trainer.model.fitted:
        db.save_cost_model(target_hash, FEATURE_VERSION, trainer.model.save(), len(trainer),
                           {"train_records": len(trainer)})
