"""How each window's verdict was reached (its basis and band, the step overhead in force),
and the stored step-time profiles other endpoints reference (ECONOMICS.md §3b).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("speedup_low_ratio", sa.Float))
        batch.add_column(sa.Column("speedup_high_ratio", sa.Float))
        batch.add_column(sa.Column("step_overhead_ratio", sa.Float))
        batch.add_column(sa.Column("verdict_basis", sa.String(16)))
    op.create_table(
        "model_profiles",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("learned_from", sa.String(512), nullable=False),
        sa.Column("ridge_batch_requests", sa.Float, nullable=False),
        sa.Column("step_overhead_ratio", sa.Float, nullable=False),
        sa.Column("draft_cost_ratio", sa.Float),
        sa.Column("plain_fixed_seconds", sa.Float),
        sa.Column("plain_per_token_seconds", sa.Float),
        sa.Column("plain_residual_low", sa.Float),
        sa.Column("plain_residual_high", sa.Float),
        sa.Column("points", sa.Integer, nullable=False),
        sa.Column("mean_abs_error_ratio", sa.Float),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_profiles")
    with op.batch_alter_table("windows") as batch:
        for column in ("verdict_basis", "step_overhead_ratio", "speedup_high_ratio"):
            batch.drop_column(column)
        batch.drop_column("speedup_low_ratio")
