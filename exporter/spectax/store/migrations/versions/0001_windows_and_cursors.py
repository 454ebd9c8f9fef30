"""Windows and cursors: the first schema (spectax 0.1, issue 2).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "windows",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("start", UTC_DATETIME, nullable=False),
        sa.Column("end", UTC_DATETIME, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("busy_seconds", sa.Float, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("requests_finished", sa.BigInteger, nullable=False),
        sa.Column("drafts", sa.BigInteger),
        sa.Column("draft_tokens", sa.BigInteger),
        sa.Column("accepted_tokens", sa.BigInteger),
        sa.Column("accepted_per_position", sa.Text, nullable=False),
        sa.Column("running_seconds", sa.Float, nullable=False),
        sa.Column("iteration_tokens_sum", sa.Float),
        sa.Column("iteration_tokens_count", sa.Float),
        sa.Column("inter_token_latency_sum", sa.Float),
        sa.Column("inter_token_latency_count", sa.Float),
        sa.Column("time_per_output_token_sum", sa.Float),
        sa.Column("time_per_output_token_count", sa.Float),
        sa.Column("spend_usd", sa.BigInteger),
        sa.Column("busy_spend_usd", sa.BigInteger),
        sa.Column("concurrency_requests", sa.Float, nullable=False),
        sa.Column("acceptance_ratio", sa.Float),
        sa.Column("breakeven_acceptance_ratio", sa.Float),
        sa.Column("speedup_ratio", sa.Float),
        sa.Column("ridge_batch_requests", sa.Float, nullable=False),
        sa.Column("draft_cost_ratio", sa.Float),
        sa.Column("speculation_savings_usd", sa.Float),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.UniqueConstraint("endpoint", "model", "start", name="uq_window"),
    )
    op.create_index("ix_windows_start", "windows", ["start"])
    op.create_table(
        "cursors",
        sa.Column("endpoint", sa.String(64), primary_key=True),
        sa.Column("observed_at", sa.Float, nullable=False),
        sa.Column("sample", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cursors")
    op.drop_index("ix_windows_start", "windows")
    op.drop_table("windows")
