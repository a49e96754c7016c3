"""Initial schema: targets, workloads, candidates, measurements, sessions,
cost models and graph candidates.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer(), nullable=False)


def _created_at() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(), nullable=False)


def _hash(name: str) -> sa.Column:
    return sa.Column(name, sa.String(length=128), nullable=False)


def upgrade() -> None:
    op.create_table(
        "target",
        _id(),
        _hash("target_hash"),
        sa.Column("target_json", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_target")),
        sa.UniqueConstraint("target_hash", name=op.f("uq_target_target_hash")),
    )
    op.create_table(
        "workload",
        _id(),
        _hash("workload_hash"),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("op_kind", sa.String(length=32), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("shapes_json", sa.Text(), nullable=False),
        sa.Column("flops", sa.Float(), nullable=False),
        sa.Column("bytes_moved", sa.Float(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workload")),
        sa.UniqueConstraint("workload_hash", name=op.f("uq_workload_workload_hash")),
    )
    op.create_table(
        "candidate",
        _id(),
        _hash("candidate_hash"),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("trace_json", sa.Text(), nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workload.id"], name=op.f("fk_candidate_workload_id_workload")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidate")),
        sa.UniqueConstraint("candidate_hash", name=op.f("uq_candidate_candidate_hash")),
    )
    op.create_index(op.f("ix_candidate_workload_id"), "candidate", ["workload_id"])
    op.create_table(
        "session",
        _id(),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("model_source", sa.Text(), nullable=False),
        _hash("model_hash"),
        sa.Column("code_version", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'interrupted', 'failed')",
            name=op.f("ck_session_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session")),
    )
    op.create_index(op.f("ix_session_model_hash"), "session", ["model_hash"])
    op.create_table(
        "measure_result",
        _id(),
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("times_s", sa.Text(), nullable=False),
        sa.Column("median_s", sa.Float(), nullable=True),
        sa.Column("mean_s", sa.Float(), nullable=True),
        sa.Column("min_s", sa.Float(), nullable=True),
        sa.Column("stdev_s", sa.Float(), nullable=True),
        sa.Column("build_time_s", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["candidate_id"], ["candidate.id"], name=op.f("fk_measure_result_candidate_id_candidate")
        ),
        sa.ForeignKeyConstraint(
            ["target_id"], ["target.id"], name=op.f("fk_measure_result_target_id_target")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["session.id"], name=op.f("fk_measure_result_session_id_session")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measure_result")),
    )
    op.create_index(op.f("ix_measure_result_candidate_id"), "measure_result", ["candidate_id"])
    op.create_index(op.f("ix_measure_result_target_id"), "measure_result", ["target_id"])
    op.create_index(op.f("ix_measure_result_session_id"), "measure_result", ["session_id"])
    op.create_index(
        "ix_measure_result_target_candidate", "measure_result", ["target_id", "candidate_id"]
    )
    op.create_table(
        "cost_model_version",
        _id(),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("feature_version", sa.String(length=64), nullable=False),
        sa.Column("booster", sa.LargeBinary(), nullable=False),
        sa.Column("record_count", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.Text(), nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["target_id"], ["target.id"], name=op.f("fk_cost_model_version_target_id_target")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_model_version")),
    )
    op.create_index(op.f("ix_cost_model_version_target_id"), "cost_model_version", ["target_id"])
    op.create_table(
        "graph_candidate",
        _id(),
        _hash("graph_hash"),
        _hash("model_hash"),
        sa.Column("term_text", sa.Text(), nullable=False),
        sa.Column("workload_hashes", sa.Text(), nullable=False),
        sa.Column("predicted_latency_s", sa.Float(), nullable=True),
        sa.Column("measured_latency_s", sa.Float(), nullable=True),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_graph_candidate")),
        sa.UniqueConstraint("graph_hash", name=op.f("uq_graph_candidate_graph_hash")),
    )
    op.create_index(op.f("ix_graph_candidate_model_hash"), "graph_candidate", ["model_hash"])


def downgrade() -> None:
    for table in (
        "graph_candidate",
        "cost_model_version",
        "measure_result",
        "session",
        "candidate",
        "workload",
        "target",
    ):
        op.drop_table(table)
