"""Candidate claims: a session claims a candidate on a target before measuring it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "candidate_claim",
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("measured_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["candidate_id"], ["candidate.id"], name=op.f("fk_candidate_claim_candidate_id_candidate")
        ),
        sa.ForeignKeyConstraint(
            ["target_id"], ["target.id"], name=op.f("fk_candidate_claim_target_id_target")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["session.id"], name=op.f("fk_candidate_claim_session_id_session")
        ),
        sa.PrimaryKeyConstraint("candidate_id", "target_id", name=op.f("pk_candidate_claim")),
    )
    op.create_index(op.f("ix_candidate_claim_target_id"), "candidate_claim", ["target_id"])
    op.create_index(op.f("ix_candidate_claim_session_id"), "candidate_claim", ["session_id"])


def downgrade() -> None:
    op.drop_table("candidate_claim")
