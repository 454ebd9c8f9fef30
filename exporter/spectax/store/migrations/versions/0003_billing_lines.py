"""Billing lines, the periods each billing source covered, and when each was last read.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "billing_lines",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("resource", sa.String(512), nullable=False),
        sa.Column("endpoint", sa.String(64)),
        sa.Column("start", UTC_DATETIME, nullable=False),
        sa.Column("end", UTC_DATETIME, nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),  # nano-units of currency
        sa.Column("currency", sa.String(8), nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("fetched_at", UTC_DATETIME, nullable=False),
        sa.UniqueConstraint("source", "resource", "start", "end", name="uq_billing_line"),
    )
    op.create_index("ix_billing_lines_endpoint_start", "billing_lines", ["endpoint", "start"])
    op.create_table(
        "billing_periods",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("endpoint", sa.String(64), primary_key=True),
        sa.Column("start", UTC_DATETIME, primary_key=True),
        sa.Column("end", UTC_DATETIME, primary_key=True),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("fetched_at", UTC_DATETIME, nullable=False),
    )
    op.create_table(
        "billing_polls",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("attempted_at", UTC_DATETIME),
        sa.Column("succeeded_at", UTC_DATETIME),
        sa.Column("ok", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("billing_polls")
    op.drop_table("billing_periods")
    op.drop_index("ix_billing_lines_endpoint_start", table_name="billing_lines")
    op.drop_table("billing_lines")
