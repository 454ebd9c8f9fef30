"""An index of the windows by endpoint and start (issue 31).

A restart reads each endpoint's last day of closed windows for the plain curve's
calibration: it chooses them by their (endpoint, start) pairs, then reads their rows. The
unique key is (endpoint, model, start), which gives neither in order: the choice read every
row the retention kept (14 days by default), and each chosen row was looked up by its start
alone, among every endpoint's windows of that start. This index serves both.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_windows_endpoint_start", "windows", ["endpoint", "start"])


def downgrade() -> None:
    op.drop_index("ix_windows_endpoint_start", "windows")
