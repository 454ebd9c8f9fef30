"""The windows of each hour binned by load (issue 34): `rollup_load_bins`, one row per
endpoint, model, hour, load bin, verdict basis and drafted-or-not, with the sums the load
curve adds up (models.LoadBinRow).

The daemon's load curve re-read every window of its lookback at each refresh, and the
monthly report binned whole hours at their mean load; windows are kept 14 days, so a
month's curve could not be made window by window later. The hourly rollup now writes
these rows with an hour's hourly rows, from the same windows, and the hourly retention
removes them.

Filled by the rollup, as 0005 filled its counts: the hours whose windows are all still kept
(each model's hourly row counts as many windows as the windows table holds in it) are marked
due, and the next rollup (the daemon's, or `spectax report`'s before it reads) bins them.
An hour retention has cut into gets no bins (its windows would be binned in part); the
report falls back to its hourly row there, and on every hour older than the windows kept.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime(timezone=True)
TABLE = "rollup_load_bins"

# As 0005's: the hours rolled before whose windows are all still there, and not yet due.
MARK_COMPLETE_HOURS = """
INSERT INTO rollup_due (granularity, endpoint, start, version)
SELECT DISTINCT 'hour', h.endpoint, h.start, 1 FROM rollup_hourly h
WHERE h.start >= (SELECT MIN(start) FROM windows)
AND NOT EXISTS (
    SELECT 1 FROM rollup_hourly o
    WHERE o.endpoint = h.endpoint AND o.start = h.start AND o.windows <> (
        SELECT COUNT(*) FROM windows w
        WHERE w.endpoint = o.endpoint AND w.model = o.model
        AND w.start >= o.start AND w.start < o."end"
    )
)
AND NOT EXISTS (
    SELECT 1 FROM rollup_due d
    WHERE d.granularity = 'hour' AND d.endpoint = h.endpoint AND d.start = h.start
)
"""


def upgrade() -> None:
    # Frozen here, not taken from the models: a migration keeps the schema of its own day.
    op.create_table(
        TABLE,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("start", UTC_DATETIME, nullable=False),
        sa.Column("edge", sa.Integer, nullable=False),
        sa.Column("verdict_basis", sa.String(16)),
        sa.Column("drafted", sa.Boolean, nullable=False),
        sa.Column("windows", sa.Integer, nullable=False),
        sa.Column("end", UTC_DATETIME, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("running_seconds", sa.Float, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("drafts", sa.BigInteger),
        sa.Column("draft_tokens", sa.BigInteger),
        sa.Column("accepted_tokens", sa.BigInteger),
        sa.Column("accepted_per_position", sa.Text, nullable=False),
        sa.Column("plain_busy_seconds", sa.Float),
        sa.Column("assessed_busy_seconds", sa.Float),
        sa.Column("low_busy_seconds", sa.Float),
        sa.Column("high_busy_seconds", sa.Float),
        sa.Column("low_missing", sa.Integer, nullable=False),
        sa.Column("high_missing", sa.Integer, nullable=False),
        sa.Column("savings_usd", sa.Float),
        sa.Column("busy_usd", sa.BigInteger),
        sa.Column("ridge_batch_requests", sa.Float, nullable=False),
        sa.Column("draft_cost_ratio", sa.Float),
    )
    op.create_index(f"ix_{TABLE}_start", TABLE, ["start"])
    op.create_index(f"ix_{TABLE}_endpoint_start", TABLE, ["endpoint", "start"])
    op.execute(MARK_COMPLETE_HOURS)


def downgrade() -> None:
    op.drop_index(f"ix_{TABLE}_endpoint_start", TABLE)
    op.drop_index(f"ix_{TABLE}_start", TABLE)
    op.drop_table(TABLE)
