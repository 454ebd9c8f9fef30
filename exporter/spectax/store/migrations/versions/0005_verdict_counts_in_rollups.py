"""The daemon's own verdicts in the rollups: per-verdict and per-basis window counts (sums),
and the latest window's counterfactual source, band and step overhead (ECONOMICS.md §3b).

Windows are kept 14 days; a month's report reads hourly and daily rows. Without these
columns it could only recompute a verdict from an hour's sums, with neither the band nor
the basis the daemon used. NULL on rows rolled up before this revision: "not recorded".

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COUNTS = (
    "windows_pays",
    "windows_tax",
    "windows_uncertain",
    "windows_basis_measured",
    "windows_basis_calibrated",
    "windows_basis_profile",
    "windows_basis_default",
)
LATEST = ("speedup_low_ratio", "speedup_high_ratio", "step_overhead_ratio")


# The hours whose windows are all still kept (each model's row counts as many windows as the
# windows table holds in it) are rolled up again, which fills their counts and then their
# days'. An hour retention has cut into is left as it is: rolling it again would drop the
# sums of its deleted windows. Older hours stay NULL: their verdicts were never counted.
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
    for table in ("rollup_hourly", "rollup_daily"):
        with op.batch_alter_table(table) as batch:
            for name in COUNTS:
                batch.add_column(sa.Column(name, sa.Integer))
            batch.add_column(sa.Column("ridge_batch_source", sa.String(16)))
            for name in LATEST:
                batch.add_column(sa.Column(name, sa.Float))
    op.execute(MARK_COMPLETE_HOURS)


def downgrade() -> None:
    for table in ("rollup_hourly", "rollup_daily"):
        with op.batch_alter_table(table) as batch:
            for name in (*COUNTS, "ridge_batch_source", *LATEST):
                batch.drop_column(name)
