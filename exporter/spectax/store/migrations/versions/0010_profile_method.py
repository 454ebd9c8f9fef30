"""The speculative method a profile was learned with (issue 29): h and c are the method's,
so an endpoint of another method takes only B* and the plain curve from it.

NULL on profiles stored before this revision: "not recorded", read back as None.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_profiles") as batch:
        batch.add_column(sa.Column("method", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_profiles") as batch:
        batch.drop_column("method")
