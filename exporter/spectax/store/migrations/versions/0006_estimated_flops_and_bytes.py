"""vLLM's estimated FLOPs and bytes read per GPU on windows and rollups: the roofline prior
for B* (ECONOMICS.md §3b; vLLM exports them with --enable-mfu-metrics).

Floats, not integers like the token counts: FLOPs pass 2**53 within seconds on a GPU and
a day's sum would overflow BIGINT. Rows written before this revision hold 0: no estimate.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES = ("windows", "rollup_hourly", "rollup_daily")
COLUMNS = ("estimated_flops", "estimated_read_bytes")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in COLUMNS:
                batch.add_column(
                    sa.Column(column, sa.Float, nullable=False, server_default=sa.text("0"))
                )


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in COLUMNS:
                batch.drop_column(column)
