"""The seconds across a window's engine restarts that no scrape could see (issue 30, item
10): from the last scrape of the old process to the new process's start, whose traffic is
lost. The monthly review says how many hours went unseen.

NULL on rows written or rolled up before this revision: "not recorded", never guessed.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TABLES = ("windows", "rollup_hourly", "rollup_daily")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("unobserved_seconds", sa.Float, nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("unobserved_seconds")
