"""Measurements that confirm a kernel's leaders: ``measure_result.confirm``.

A re-measurement of an already measured candidate is recorded with ``confirm``
true; a trial (a candidate's first measurement by the search, or a retry of it)
has it false. Every measurement recorded before this revision was a trial.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measure_result") as batch:
        batch.add_column(sa.Column("confirm", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("measure_result") as batch:
        batch.drop_column("confirm")
