"""Latency histograms on windows and rollups: the sums and counts of time to first token and
end-to-end request latency, and every histogram's bucket deltas, so that p50/p95/p99 can be
computed for a window, an hour or a day (issue 20; spectax.pipeline.quantiles).

Buckets are JSON text ([[le, count], ...], summed by the rollups like the per-position
counts). Rows written before this revision hold NULL: no buckets, so no quantile, never one
made up from the means.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("windows", "rollup_hourly", "rollup_daily")
FLOATS = (
    "time_to_first_token_sum",
    "time_to_first_token_count",
    "e2e_request_latency_sum",
    "e2e_request_latency_count",
)
TEXTS = (
    "iteration_tokens_buckets",
    "inter_token_latency_buckets",
    "time_per_output_token_buckets",
    "time_to_first_token_buckets",
    "e2e_request_latency_buckets",
)


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in FLOATS:
                batch.add_column(sa.Column(column, sa.Float, nullable=True))
            for column in TEXTS:
                batch.add_column(sa.Column(column, sa.Text, nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in (*FLOATS, *TEXTS):
                batch.drop_column(column)
