"""End-to-end timings of reference programs: ``program_timing``.

TVM's untuned default build of a layer takes seconds a call; ``tune run`` times it
once per model, stage, shapes and target and reuses that timing on later runs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "program_timing",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_hash", sa.String(128), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("program", sa.String(32), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=True),
        sa.Column("times_s", sa.Text(), nullable=False),
        sa.Column("median_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["target_id"], ["target.id"], name=op.f("fk_program_timing_target_id_target")),
        sa.ForeignKeyConstraint(["session_id"], ["session.id"], name=op.f("fk_program_timing_session_id_session")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_program_timing")),
    )
    op.create_index(op.f("ix_program_timing_model_hash"), "program_timing", ["model_hash"])
    op.create_index(op.f("ix_program_timing_target_id"), "program_timing", ["target_id"])
    op.create_index(op.f("ix_program_timing_session_id"), "program_timing", ["session_id"])


def downgrade() -> None:
    op.drop_table("program_timing")
