"""Cold-start money and the ridge source on windows; hourly and daily rollups.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def _sums() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("start", UTC_DATETIME, nullable=False, index=True),
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
        sa.Column("cold_start_usd", sa.BigInteger),
        sa.Column("draft_load_usd", sa.BigInteger),
        sa.Column("speculation_savings_usd", sa.Float),
        sa.Column("draft_cost_ratio", sa.Float),
        sa.Column("ridge_batch_requests", sa.Float, nullable=False),
        sa.Column("windows", sa.Integer, nullable=False),
    ]


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("cold_start_usd", sa.BigInteger))
        batch.add_column(sa.Column("draft_load_usd", sa.BigInteger))
        batch.add_column(
            sa.Column(
                "ridge_batch_source", sa.String(16), nullable=False, server_default="configured"
            )
        )
    for table in ("rollup_hourly", "rollup_daily"):
        op.create_table(
            table, *_sums(), sa.UniqueConstraint("endpoint", "model", "start", name=f"uq_{table}")
        )
    op.create_table(
        "rollup_due",
        sa.Column("granularity", sa.String(8), primary_key=True),
        sa.Column("endpoint", sa.String(64), primary_key=True),
        sa.Column("start", UTC_DATETIME, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    # Windows written before rollups existed are rolled up on the next rollup run (a mark
    # may name any instant in its period: the rollup floors it to the hour).
    op.execute(
        "INSERT INTO rollup_due (granularity, endpoint, start, version) "
        "SELECT DISTINCT 'hour', endpoint, start, 1 FROM windows"
    )


def downgrade() -> None:
    op.drop_table("rollup_due")
    op.drop_table("rollup_daily")
    op.drop_table("rollup_hourly")
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("ridge_batch_source")
        batch.drop_column("draft_load_usd")
        batch.drop_column("cold_start_usd")
