"""The KV cache on windows and rollups (issue 20: what a draft model costs in capacity):
vLLM's preemptions, waiting requests and KV-cache usage integrated over time (mean =
integral / seconds, like running_seconds), and its blocks, block size and bytes as of the
window's end (vllm:cache_config_info).

Rows written before this revision hold 0 preemptions and waiting request-seconds (not
measured) and NULL for the rest: the engine's KV cache unknown, never a 0 that looks real.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = ("windows", "rollup_hourly", "rollup_daily")
# Frozen here, not taken from the models: a migration keeps the schema of its own day.
COUNTED = (("preemptions", sa.BigInteger), ("waiting_seconds", sa.Float))
UNKNOWN_BEFORE = ("kv_usage_seconds", "kv_cache_blocks", "kv_block_size", "kv_cache_bytes")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column, kind in COUNTED:
                batch.add_column(
                    sa.Column(column, kind, nullable=False, server_default=sa.text("0"))
                )
            for column in UNKNOWN_BEFORE:
                batch.add_column(sa.Column(column, sa.Float, nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in (*(c for c, _ in COUNTED), *UNKNOWN_BEFORE):
                batch.drop_column(column)
