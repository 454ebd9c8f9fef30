"""Alembic environment: spectax runs migrations on a connection it already holds.

`spectax db upgrade` (and a fresh database at start-up) call Alembic through
`spectax.store.schema`, which passes its connection in `config.attributes`.
"""

from alembic import context

from spectax.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
