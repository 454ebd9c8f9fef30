"""What each window's assessment concluded, as sums (issue 29): the busy time its output
would have taken without speculation (busy seconds x the speedup in force) and the busy
seconds that divides, and the draft compute and rejected drafts in dollars.

The monthly report recomputed an hour's speedup and draft overhead from the hour's sums
with h = 0, not the step overhead the daemon assessed each window with, so its figures
disagreed with the windows'. With these it adds up the windows' own conclusions.

NULL on rows written or rolled up before this revision: "not recorded". They are not
recomputed (the assessment's parameters are not all stored) nor rolled up again.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLES = ("windows", "rollup_hourly", "rollup_daily")
# Frozen here, not taken from the models: a migration keeps the schema of its own day.
COLUMNS = ("plain_busy_seconds", "assessed_busy_seconds", "draft_compute_usd", "rejected_usd")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in COLUMNS:
                batch.add_column(sa.Column(column, sa.Float, nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for column in COLUMNS:
                batch.drop_column(column)
